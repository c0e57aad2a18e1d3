//! Parser of the Seed syntax (DESIGN §2.1): `PLAN` or `PLAN(PR=v|*, CR=v|*, shared, euAccess[=*])`.

use super::lexer::Kind;
use super::model::{Cond, EuAccess, Rule};
use super::parse::{Cursor, Issue, ParseResult, Parsed, did_you_mean, reject_foreign};

const ATTRS: [&str; 5] = ["PR", "CR", "HR", "shared", "euAccess"];

/// Parses one Seed entry.
pub fn parse(input: &str) -> ParseResult {
    let mut c = Cursor::new(input);
    reject_foreign(&c)?;
    if let Some(t) = c.tokens().iter().find(|t| t.kind == Kind::Arrow) {
        return Err(Issue::new(
            t.col,
            "`->` belongs to the KEB syntax: set `ruleSyntax: KEB`, or write the outputs as attributes (`shared`, `euAccess`)",
        ));
    }
    let Some(head) = c.bump() else {
        return Err(Issue::new(
            1,
            "the entry is empty: write a plan name, e.g. `aws`",
        ));
    };
    let Kind::Word(plan) = head.kind else {
        return Err(Issue::new(
            head.col,
            format!(
                "plan name is empty: expected a plan before {}",
                head.describe()
            ),
        ));
    };
    let mut rule = Rule::plain(plan);
    let parens = c.eat(Kind::LParen);
    if parens {
        attributes(&mut c, &mut rule)?;
    }
    if let Some(t) = c.peek() {
        let message = if parens {
            format!(
                "unexpected {} after `)`: nothing may follow the attribute list",
                t.describe()
            )
        } else {
            format!(
                "unexpected {} after the plan name: a plan name has no spaces, attributes go in parentheses",
                t.describe()
            )
        };
        return Err(Issue::new(t.col, message));
    }
    Ok(Parsed {
        rule,
        plan_col: head.col,
        warnings: Vec::new(),
    })
}

fn attributes(c: &mut Cursor<'_>, rule: &mut Rule) -> Result<(), Issue> {
    if c.eat(Kind::RParen) {
        return Ok(());
    }
    let mut seen: Vec<&str> = Vec::new();
    loop {
        let Some(t) = c.bump() else {
            return Err(Issue::new(
                c.end(),
                "missing `)` at the end of the attribute list",
            ));
        };
        match t.kind {
            Kind::Word(key) => attribute(c, rule, key, t.col, &mut seen)?,
            Kind::Comma | Kind::RParen => {
                return Err(Issue::new(t.col, "empty attribute: remove the extra `,`"));
            }
            _ => {
                return Err(Issue::new(
                    t.col,
                    format!(
                        "expected an attribute (PR, CR, shared, euAccess), found {}",
                        t.describe()
                    ),
                ));
            }
        }
        match c.bump() {
            Some(t) if t.kind == Kind::Comma => {}
            Some(t) if t.kind == Kind::RParen => return Ok(()),
            Some(t) => {
                return Err(Issue::new(
                    t.col,
                    format!(
                        "expected `,` or `)` after the attribute, found {}",
                        t.describe()
                    ),
                ));
            }
            None => {
                return Err(Issue::new(
                    c.end(),
                    "missing `)` at the end of the attribute list",
                ));
            }
        }
    }
}

fn attribute<'a>(
    c: &mut Cursor<'a>,
    rule: &mut Rule,
    key: &'a str,
    col: usize,
    seen: &mut Vec<&'a str>,
) -> Result<(), Issue> {
    let canonical = if key == "HR" { "CR" } else { key };
    if ATTRS.contains(&key) && seen.contains(&canonical) {
        let alias = if canonical == "CR" {
            " (`HR` is an alias of `CR`)"
        } else {
            ""
        };
        return Err(Issue::new(
            col,
            format!("`{canonical}` is already set in this entry{alias}"),
        ));
    }
    match key {
        "PR" | "CR" | "HR" => {
            let cond = region(c, key)?;
            if canonical == "PR" {
                rule.pr = cond;
                rule.pr_suffix = true;
            } else {
                rule.cr = cond;
                rule.cr_suffix = true;
            }
        }
        "shared" => rule.shared = flag(c, key, false)? == Some(true),
        "euAccess" => {
            rule.eu_access = match flag(c, key, true)? {
                Some(true) => EuAccess::Always,
                Some(false) => EuAccess::Never,
                None => EuAccess::FromRequest,
            }
        }
        _ => return Err(Issue::new(col, unknown(key))),
    }
    seen.push(canonical);
    Ok(())
}

fn unknown(key: &str) -> String {
    let hint = match key {
        "S" => " (`S` is a KEB output; in the Seed syntax write `shared`)".to_string(),
        "EU" => " (`EU` is a KEB output; in the Seed syntax write `euAccess`)".to_string(),
        _ => did_you_mean(key, ATTRS),
    };
    format!("unknown attribute `{key}`{hint}; attributes are PR, CR (or HR), shared and euAccess")
}

/// `=<value>` or `=*` after a region key.
fn region(c: &mut Cursor<'_>, key: &str) -> Result<Cond, Issue> {
    if !c.eat(Kind::Eq) {
        return Err(Issue::new(
            c.col(),
            format!("`{key}` needs a value: `{key}=<region>` or `{key}=*`"),
        ));
    }
    let col = c.col();
    match c.peek_kind() {
        Some(Kind::Word(v)) => {
            c.bump();
            Ok(Cond::Exact(v.to_string()))
        }
        Some(Kind::Star) => {
            c.bump();
            Ok(Cond::Any)
        }
        _ => Err(Issue::new(
            col,
            format!("{key} is empty: write `{key}=<region>` or `{key}=*`"),
        )),
    }
}

/// A flag: bare (`true`), `=true`, `=false`, or `=*` (`None`) where `star` allows it.
fn flag(c: &mut Cursor<'_>, key: &str, star: bool) -> Result<Option<bool>, Issue> {
    if !c.eat(Kind::Eq) {
        return Ok(Some(true));
    }
    let col = c.col();
    let value = match c.peek_kind() {
        Some(Kind::Word("true")) => Some(true),
        Some(Kind::Word("false")) => Some(false),
        Some(Kind::Star) if star => None,
        _ => {
            let allowed = if star {
                "`true`, `false` or `*`"
            } else {
                "`true` or `false`"
            };
            return Err(Issue::new(col, format!("`{key}` takes {allowed}")));
        }
    };
    c.bump();
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(s: &str) -> Issue {
        parse(s).unwrap_err()
    }

    #[test]
    fn full_entry() {
        let r = parse(" gcp ( CR = * , PR=cf-sa30, shared=true, euAccess=* ) ")
            .unwrap()
            .rule;
        assert_eq!(r.pr, Cond::Exact("cf-sa30".into()));
        assert_eq!(r.cr, Cond::Any);
        assert!(r.pr_suffix && r.cr_suffix && r.shared);
        assert_eq!(r.eu_access, EuAccess::FromRequest);
    }

    #[test]
    fn empty_parens_equal_plain() {
        assert_eq!(parse("aws()").unwrap().rule, parse("aws").unwrap().rule);
    }

    #[test]
    fn hr_is_an_alias_and_repeats_are_errors() {
        assert_eq!(
            parse("x(HR=a)").unwrap().rule,
            parse("x(CR=a)").unwrap().rule
        );
        let e = err("x(CR=a, HR=b)");
        assert_eq!(e.col, 9);
        assert!(e.message.contains("alias"));
    }

    #[test]
    fn errors_point_at_columns() {
        assert_eq!(err("aws(PR=)").col, 8);
        assert_eq!(err("aws(PR=x)y").col, 10);
        assert_eq!(err("aws(PR=x").col, 9);
        assert_eq!(err("aws(pr=x)").col, 5);
        assert!(err("aws(pr=x)").message.contains("did you mean `PR`"));
        assert!(err("aws -> S").message.contains("KEB"));
        assert!(err("").message.contains("empty"));
        assert!(err("aws(shared=yes)").message.contains("`true` or `false`"));
        assert!(err("aws(,)").message.contains("empty attribute"));
        assert!(err("aws(PR=a,)").message.contains("empty attribute"));
        assert!(err("a ws").message.contains("after the plan name"));
    }
}
