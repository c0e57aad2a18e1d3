//! Field paths into a request object (`spec.shoot.region`, `.spec.provider.type`,
//! `spec.workers[0].name`, `metadata.labels['kyma-project.io/region']`): parsed once when the
//! HapConfig is compiled, then looked up in the object's JSON.

use std::fmt;

use serde_json::Value;

/// One step of a path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    Key(String),
    Index(usize),
}

/// A parsed path; prints in the canonical dotted form (`spec.workers[0].name`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldPath(Vec<Step>);

/// Why a path does not parse; `column` is 1-based.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("column {column}: {message}")]
pub struct PathError {
    pub column: usize,
    pub message: String,
}

fn key_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

impl FieldPath {
    pub fn parse(text: &str) -> Result<Self, PathError> {
        let chars: Vec<char> = text.chars().collect();
        let err = |i: usize, m: &str| PathError {
            column: i + 1,
            message: m.to_string(),
        };
        let mut steps = Vec::new();
        let mut i = usize::from(chars.first() == Some(&'.'));
        let mut expect_key = true;
        while i < chars.len() {
            if expect_key {
                let start = i;
                while i < chars.len() && key_char(chars[i]) {
                    i += 1;
                }
                if i == start {
                    return Err(err(i, "expected a field name (letters, digits, `_`, `-`)"));
                }
                steps.push(Step::Key(chars[start..i].iter().collect()));
                expect_key = false;
                continue;
            }
            match chars[i] {
                '.' => {
                    i += 1;
                    expect_key = true;
                    if i == chars.len() {
                        return Err(err(i, "a path cannot end with `.`"));
                    }
                }
                '[' if chars.get(i + 1) == Some(&'\'') => {
                    let start = i + 2;
                    let Some(len) = chars[start..].iter().position(|c| *c == '\'') else {
                        return Err(err(i, "unterminated `['...']`"));
                    };
                    if chars.get(start + len + 1) != Some(&']') || len == 0 {
                        return Err(err(i, "write a quoted key as `['key']`"));
                    }
                    steps.push(Step::Key(chars[start..start + len].iter().collect()));
                    i = start + len + 2;
                }
                '[' => {
                    let start = i + 1;
                    let digits = chars[start..]
                        .iter()
                        .take_while(|c| c.is_ascii_digit())
                        .count();
                    if digits == 0 || chars.get(start + digits) != Some(&']') {
                        return Err(err(i, "write a list index as `[0]`"));
                    }
                    let n: String = chars[start..start + digits].iter().collect();
                    let index = n.parse().map_err(|_| err(start, "list index too large"))?;
                    steps.push(Step::Index(index));
                    i = start + digits + 1;
                }
                c => return Err(err(i, &format!("unexpected `{c}`"))),
            }
        }
        if steps.is_empty() {
            return Err(err(chars.len(), "the path is empty"));
        }
        Ok(FieldPath(steps))
    }

    /// The value at the path, if every step exists.
    pub fn lookup<'a>(&self, obj: &'a Value) -> Option<&'a Value> {
        self.0.iter().try_fold(obj, |v, step| match step {
            Step::Key(k) => v.get(k),
            Step::Index(i) => v.get(*i),
        })
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (n, step) in self.0.iter().enumerate() {
            match step {
                Step::Key(k) if k.chars().all(key_char) => {
                    if n > 0 {
                        f.write_str(".")?;
                    }
                    f.write_str(k)?;
                }
                Step::Key(k) => write!(f, "['{k}']")?,
                Step::Index(i) => write!(f, "[{i}]")?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_dotted_indexed_and_quoted_steps() {
        let p = FieldPath::parse(".spec.workers[1]['a.b/c'].name").expect("parses");
        assert_eq!(p.to_string(), "spec.workers[1]['a.b/c'].name");
        let obj = json!({"spec": {"workers": [{}, {"a.b/c": {"name": "w"}}]}});
        assert_eq!(p.lookup(&obj), Some(&json!("w")));
        let p = FieldPath::parse("spec.shoot.region").expect("parses");
        assert_eq!(p.lookup(&json!({"spec": {"shoot": {}}})), None);
    }

    #[test]
    fn errors_name_the_column() {
        for (text, column) in [
            ("", 1),
            (".", 2),
            ("spec.", 6),
            ("spec..x", 6),
            ("spec[x]", 5),
            ("spec['x'", 5),
            ("spec x", 5),
            ("spec['']", 5),
        ] {
            let e = FieldPath::parse(text).expect_err(text);
            assert_eq!(e.column, column, "{text}: {e}");
        }
    }
}
