//! What the entry parsers share: the parse result, the positioned issue, and a token cursor.

use super::lexer::{Kind, Token, end_col, lex};
use super::model::{Rule, TenantCond};

/// A parse error or warning at a 1-based character column of the entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Issue {
    pub col: usize,
    pub message: String,
}

impl Issue {
    pub fn new(col: usize, message: impl Into<String>) -> Self {
        Self {
            col,
            message: message.into(),
        }
    }
}

/// A successfully parsed entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Parsed {
    pub rule: Rule,
    /// Column of the plan name, where plan errors point.
    pub plan_col: usize,
    /// Per preference of `rule.pools`: the column where it is written (the plan for the primary,
    /// the `|` for each fallback), where errors about one preference point.
    pub pref_cols: Vec<usize>,
    pub warnings: Vec<Issue>,
}

pub type ParseResult = Result<Parsed, Issue>;

/// A forward-only view of an entry's tokens.
pub struct Cursor<'a> {
    tokens: Vec<Token<'a>>,
    pos: usize,
    end: usize,
}

impl<'a> Cursor<'a> {
    pub fn new(input: &'a str) -> Self {
        Self {
            tokens: lex(input),
            pos: 0,
            end: end_col(input),
        }
    }

    pub fn tokens(&self) -> &[Token<'a>] {
        &self.tokens
    }

    pub fn peek(&self) -> Option<Token<'a>> {
        self.tokens.get(self.pos).copied()
    }

    pub fn peek_kind(&self) -> Option<Kind<'a>> {
        self.peek().map(|t| t.kind)
    }

    pub fn bump(&mut self) -> Option<Token<'a>> {
        let t = self.peek();
        if t.is_some() {
            self.pos += 1;
        }
        t
    }

    /// Consumes the next token if it is `kind`.
    pub fn eat(&mut self, kind: Kind<'_>) -> bool {
        if self.peek_kind() == Some(kind) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    /// Column of the next token, or just past the end.
    pub fn col(&self) -> usize {
        self.peek().map_or(self.end, |t| t.col)
    }

    pub fn end(&self) -> usize {
        self.end
    }
}

/// After the key `GA`: `=` or `!=`, then global accounts separated by `|`. The comma cannot
/// separate them as in upstream KEB's blocklist (`GA=a,b`): it separates attributes here, and a
/// global account may look like one (`shared`). `keys` are the entry's attribute names, to tell a
/// comma that was meant inside the list from one that starts the next attribute.
pub fn tenant_cond(c: &mut Cursor<'_>, keys: &[&str]) -> Result<TenantCond, Issue> {
    let exclude = match c.peek_kind() {
        Some(Kind::Eq) => false,
        Some(Kind::NotEq) => true,
        _ => {
            return Err(Issue::new(
                c.col(),
                "`GA` needs global accounts: `GA=<id>|<id>` (deny these) or `GA!=<id>|<id>` (deny all but these)",
            ));
        }
    };
    c.bump();
    let mut values = Vec::new();
    loop {
        let col = c.col();
        let Some(Kind::Word(v)) = c.peek_kind() else {
            let what = if values.is_empty() {
                "GA is empty"
            } else {
                "empty global account after `|`"
            };
            return Err(Issue::new(
                col,
                format!("{what}: write `GA=<id>` or `GA=<id>|<id>`"),
            ));
        };
        c.bump();
        if let Some(problem) = crate::diag::label_value_problem(v) {
            return Err(Issue::new(
                col,
                format!("`{v}` is not a global account a request can carry, {problem}"),
            ));
        }
        values.push(v);
        if !c.eat(Kind::Bar) {
            break;
        }
    }
    comma_inside_list(c, keys)?;
    let list = TenantCond::normalize(&values);
    Ok(if exclude {
        TenantCond::NotIn(list)
    } else {
        TenantCond::In(list)
    })
}

/// `GA=a,b`: the comma is followed by a word that is no attribute and has no `=`.
fn comma_inside_list(c: &Cursor<'_>, keys: &[&str]) -> Result<(), Issue> {
    let rest = &c.tokens()[c.pos..];
    if let [comma, word, next @ ..] = rest
        && comma.kind == Kind::Comma
        && let Kind::Word(w) = word.kind
        && !keys.contains(&w)
        && !matches!(next.first().map(|t| t.kind), Some(Kind::Eq | Kind::NotEq))
    {
        return Err(Issue::new(
            comma.col,
            format!(
                "global accounts are separated by `|`, not `,` (the comma separates attributes): write `GA=…|{w}`"
            ),
        ));
    }
    Ok(())
}

/// A `GA` condition on an entry that names pools: choosing a pool by tenant is not what entries
/// do (pins and `spec.tenants` do), so only a deny may target global accounts.
pub fn only_deny_names_tenants(c: &Cursor<'_>, rule: &Rule) -> Result<(), Issue> {
    if rule.ga.is_absent() || rule.is_deny() {
        return Ok(());
    }
    let col = c
        .tokens()
        .iter()
        .find(|t| t.kind == Kind::Word("GA"))
        .map_or(1, |t| t.col);
    Err(Issue::new(
        col,
        "only a deny entry may name global accounts (`GA=`, `GA!=`): an entry that names pools applies to every tenant (pin a tenant with `spec.pins` instead)",
    ))
}

/// Rejects the first character that can never appear in an entry.
pub fn reject_foreign(cursor: &Cursor<'_>) -> Result<(), Issue> {
    for t in cursor.tokens() {
        if let Kind::Other(c) = t.kind {
            let hint = match c {
                ';' => ": write one rule entry per list item",
                ':' => ": `plan:region` is the legacy syntax (legacyRules)",
                _ => "",
            };
            return Err(Issue::new(
                t.col,
                format!("unexpected character `{}`{hint}", c.escape_debug()),
            ));
        }
    }
    Ok(())
}

/// The longest deny message; the whole entry is at most 256 characters anyway (CRD).
pub const MAX_MESSAGE_CHARS: usize = 200;

/// The message of a `Kind::Str` token at `col`, with `\"` and `\\` resolved, then checked.
pub fn message(raw: &str, closed: bool, col: usize) -> Result<String, Issue> {
    if !closed {
        return Err(Issue::new(
            col,
            "the message has no closing `\"` (write `\\\"` for a quote inside it)",
        ));
    }
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars().enumerate();
    while let Some((i, c)) = chars.next() {
        let at = col + 1 + i;
        match c {
            '\\' => match chars.next() {
                Some((_, e @ ('"' | '\\'))) => out.push(e),
                _ => {
                    return Err(Issue::new(
                        at,
                        "unknown escape in the message: only `\\\"` and `\\\\` are escapes",
                    ));
                }
            },
            c if c.is_control() => {
                return Err(Issue::new(
                    at,
                    "the message contains a control character (a line break or a tab)",
                ));
            }
            c => out.push(c),
        }
    }
    message_text(&out).map_err(|m| Issue::new(col, m))
}

/// Checks a deny message as written in a structured entry (no escapes there): not blank, no
/// control characters, not too long.
pub fn message_text(text: &str) -> Result<String, String> {
    if text.trim().is_empty() {
        return Err(
            "the message is empty: say why the request is denied, or leave the message out".into(),
        );
    }
    if text.chars().any(char::is_control) {
        return Err("the message contains a control character (a line break or a tab)".into());
    }
    if text.chars().count() > MAX_MESSAGE_CHARS {
        return Err(format!(
            "the message is longer than {MAX_MESSAGE_CHARS} characters"
        ));
    }
    Ok(text.to_string())
}

/// Edit distance counting a swap of two neighbours as one edit (optimal string alignment),
/// for did-you-mean hints on attribute and plan names.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut v = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                v = v.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = v;
        }
    }
    d[a.len()][b.len()]
}

/// The closest candidate within a distance that still reads as a typo.
pub fn closest<'c>(word: &str, candidates: impl IntoIterator<Item = &'c str>) -> Option<&'c str> {
    let lower = word.to_ascii_lowercase();
    let limit = (word.chars().count() / 3).max(1);
    candidates
        .into_iter()
        .map(|c| (edit_distance(&lower, &c.to_ascii_lowercase()), c))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// ` (did you mean `X`?)` or nothing.
pub fn did_you_mean<'c>(word: &str, candidates: impl IntoIterator<Item = &'c str>) -> String {
    closest(word, candidates)
        .map(|c| format!(" (did you mean `{c}`?)"))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_resolve_escapes_and_reject_junk() {
        assert_eq!(message(r#"a \"b\" \\ c"#, true, 1).unwrap(), r#"a "b" \ c"#);
        assert_eq!(message("x", false, 7).unwrap_err().col, 7);
        assert_eq!(message(r"a\n", true, 10).unwrap_err().col, 12);
        assert!(
            message("  ", true, 1)
                .unwrap_err()
                .message
                .contains("empty")
        );
        assert!(
            message("a\tb", true, 1)
                .unwrap_err()
                .message
                .contains("control")
        );
        assert!(message(&"x".repeat(201), true, 1).is_err());
    }

    #[test]
    fn distance_and_suggestions() {
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(closest("pr", ["PR", "CR"]), Some("PR"));
        assert_eq!(closest("gpc", ["gcp", "aws"]), Some("gcp"));
        assert_eq!(closest("xyz", ["gcp", "aws"]), None);
    }
}
