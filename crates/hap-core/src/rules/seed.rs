//! Parser of the Seed syntax (docs/design.md §2.1): `PLAN` or `PLAN(PR=v|*, CR=v|*, shared, euAccess[=*])`,
//! extended by ordered fallback pools (`PLAN(...) | (OUTPUTS) | (OUTPUTS)`) and by deny
//! (`PLAN(CONDITIONS) deny ["message"]`), see docs/rules.md §2.4.

use super::lexer::Kind;
use super::model::{Cond, EuAccess, PoolResult, Rule};
use super::parse::{
    Cursor, Issue, ParseResult, Parsed, did_you_mean, message, only_deny_names_tenants,
    reject_foreign, tenant_cond,
};

const ATTRS: [&str; 6] = ["PR", "CR", "HR", "GA", "shared", "euAccess"];

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
    let mut outputs = Vec::new();
    let parens = c.eat(Kind::LParen);
    if parens {
        attributes(&mut c, &mut rule, &mut outputs)?;
    }
    let mut pref_cols = vec![head.col];
    match c.peek() {
        None => {}
        Some(t) if t.kind == Kind::Word("deny") => {
            c.bump();
            deny(&mut c, &mut rule, &outputs)?;
            pref_cols.clear();
        }
        Some(t) if t.kind == Kind::Bar => {
            while let Some(bar) = c.peek().filter(|t| t.kind == Kind::Bar) {
                c.bump();
                pref_cols.push(bar.col);
                let pool = fallback(&mut c, &rule, bar.col)?;
                rule.pools.push(pool);
            }
            if let Some(t) = c.peek() {
                return Err(Issue::new(
                    t.col,
                    format!(
                        "unexpected {} after a fallback: write `| (OUTPUTS)` for another one",
                        t.describe()
                    ),
                ));
            }
        }
        Some(t) => {
            let message = if parens {
                format!(
                    "unexpected {} after `)`: nothing may follow the attribute list but `| (OUTPUTS)` fallbacks or `deny`",
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
    }
    only_deny_names_tenants(&c, &rule)?;
    Ok(Parsed {
        rule,
        plan_col: head.col,
        pref_cols,
        warnings: Vec::new(),
    })
}

/// `deny` was read: an optional message, nothing else; the head may only hold conditions.
fn deny(c: &mut Cursor<'_>, rule: &mut Rule, outputs: &[(&str, usize)]) -> Result<(), Issue> {
    if let Some((name, col)) = outputs.first() {
        return Err(Issue::new(
            *col,
            format!(
                "a deny entry has no pool: remove `{name}` (only PR, CR and GA conditions go with `deny`)"
            ),
        ));
    }
    rule.pools.clear();
    if let Some(t) = c.peek()
        && let Kind::Str { raw, closed } = t.kind
    {
        c.bump();
        rule.deny_message = Some(message(raw, closed, t.col)?);
    }
    match c.peek() {
        None => Ok(()),
        Some(t) if t.kind == Kind::Bar => Err(Issue::new(
            t.col,
            "a deny entry has no fallbacks: it denies every request it matches",
        )),
        Some(t) => Err(Issue::new(
            t.col,
            format!(
                "unexpected {} after `deny`: only a message in double quotes may follow",
                t.describe()
            ),
        )),
    }
}

fn attributes<'a>(
    c: &mut Cursor<'a>,
    rule: &mut Rule,
    outputs: &mut Vec<(&'a str, usize)>,
) -> Result<(), Issue> {
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
            Kind::Word(key) => {
                attribute(c, rule, key, t.col, &mut seen)?;
                if matches!(key, "shared" | "euAccess") {
                    outputs.push((key, t.col));
                }
            }
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
        if !list_continues(c)? {
            return Ok(());
        }
    }
}

/// After an attribute: `,` (another attribute follows: true) or `)` (the list ends: false),
/// consumed either way.
fn list_continues(c: &mut Cursor<'_>) -> Result<bool, Issue> {
    match c.peek() {
        Some(t) if t.kind == Kind::Comma => {
            c.bump();
            Ok(true)
        }
        Some(t) if t.kind == Kind::RParen => {
            c.bump();
            Ok(false)
        }
        Some(t) => Err(Issue::new(
            t.col,
            format!(
                "expected `,` or `)` after the attribute, found {}",
                t.describe()
            ),
        )),
        None => Err(Issue::new(
            c.end(),
            "missing `)` at the end of the attribute list",
        )),
    }
}

/// A repeated attribute; `HR` counts as `CR`.
fn repeated(key: &str, col: usize, seen: &[&str]) -> Result<(), Issue> {
    let canonical = if key == "HR" { "CR" } else { key };
    if ATTRS.contains(&key) && seen.contains(&canonical) {
        let alias = if canonical == "CR" {
            " (`HR` is an alias of `CR`)"
        } else {
            ""
        };
        return Err(Issue::new(
            col,
            format!(
                "`{canonical}` is already set in this entry{alias}{}",
                if canonical == "GA" {
                    " (an entry takes one of `GA=` and `GA!=`)"
                } else {
                    ""
                }
            ),
        ));
    }
    Ok(())
}

fn attribute<'a>(
    c: &mut Cursor<'a>,
    rule: &mut Rule,
    key: &'a str,
    col: usize,
    seen: &mut Vec<&'a str>,
) -> Result<(), Issue> {
    repeated(key, col, seen)?;
    let canonical = if key == "HR" { "CR" } else { key };
    let pool = &mut rule.pools[0];
    match key {
        "PR" | "CR" | "HR" => {
            let cond = region(c, key)?;
            if canonical == "PR" {
                rule.pr = cond;
                pool.pr_suffix = true;
            } else {
                rule.cr = cond;
                pool.cr_suffix = true;
            }
        }
        "shared" | "euAccess" => output(c, pool, key)?,
        "GA" => rule.ga = tenant_cond(c, &ATTRS)?,
        _ => return Err(Issue::new(col, unknown(key))),
    }
    seen.push(canonical);
    Ok(())
}

/// `shared[=true|false|fallback]` or `euAccess[=true|false|*]` into `pool`.
fn output(c: &mut Cursor<'_>, pool: &mut PoolResult, key: &str) -> Result<(), Issue> {
    if key == "shared" {
        let v = flag(c, key, &["true", "false", "fallback"])?;
        pool.shared = v != "false";
        pool.shared_fallback = v == "fallback";
    } else {
        pool.eu_access = match flag(c, key, &["true", "false", "*"])? {
            "true" => EuAccess::Always,
            "false" => EuAccess::Never,
            _ => EuAccess::FromRequest,
        };
    }
    Ok(())
}

/// The `(` after a fallback's `|`, or what a person wrote instead, said in words.
fn fallback_open(c: &mut Cursor<'_>, rule: &Rule, bar: usize) -> Result<(), Issue> {
    match c.peek() {
        Some(t) if t.kind == Kind::LParen => {
            c.bump();
            Ok(())
        }
        Some(t) if matches!(t.kind, Kind::Word(w) if w == rule.plan) => Err(Issue::new(
            t.col,
            "a fallback names only its outputs, not the plan again: write `| (shared)`, `| (euAccess)` or `| ()`",
        )),
        Some(t) => Err(Issue::new(
            bar,
            format!(
                "`|` starts a fallback, written `| (OUTPUTS)` (e.g. `| (shared=fallback)`), and {} follows it",
                t.describe()
            ),
        )),
        None => Err(Issue::new(
            bar,
            "`|` starts a fallback and nothing follows it: write `| (OUTPUTS)`, or remove the `|`",
        )),
    }
}

/// `PR`, `CR` or `HR` in a fallback: the request's region appended, which the head must require.
fn region_suffix(
    c: &Cursor<'_>,
    rule: &Rule,
    pool: &mut PoolResult,
    key: &str,
    col: usize,
) -> Result<(), Issue> {
    let pr = key == "PR";
    if c.peek_kind() == Some(Kind::Eq) {
        return Err(Issue::new(
            col,
            format!(
                "conditions go in the head, before the first `|`; in a fallback `{key}` alone appends the request's region"
            ),
        ));
    }
    let (cond, name) = if pr {
        (&rule.pr, "platform")
    } else {
        (&rule.cr, "cluster")
    };
    if cond.is_absent() {
        return Err(Issue::new(
            col,
            format!(
                "`{key}` appends the request's {name} region, which this entry does not require: add `{key}=*` or `{key}=<region>` to the head"
            ),
        ));
    }
    if pr {
        pool.pr_suffix = true;
    } else {
        pool.cr_suffix = true;
    }
    Ok(())
}

/// `| (OUTPUTS)`: the `|` was read. A fallback names outputs only: `PR`, `CR` (append the
/// request's region, which the head must require), `shared[=fallback]`, `euAccess[=*]`.
fn fallback(c: &mut Cursor<'_>, rule: &Rule, bar: usize) -> Result<PoolResult, Issue> {
    let mut pool = PoolResult::default();
    fallback_open(c, rule, bar)?;
    if c.eat(Kind::RParen) {
        return Ok(pool);
    }
    let mut seen: Vec<&str> = Vec::new();
    loop {
        let Some(t) = c.bump() else {
            return Err(Issue::new(
                c.end(),
                "missing `)` at the end of the fallback",
            ));
        };
        let Kind::Word(key) = t.kind else {
            let message = if matches!(t.kind, Kind::Comma | Kind::RParen) {
                "empty attribute: remove the extra `,`".to_string()
            } else {
                format!(
                    "expected an output (PR, CR, shared, euAccess), found {}",
                    t.describe()
                )
            };
            return Err(Issue::new(t.col, message));
        };
        repeated(key, t.col, &seen)?;
        match key {
            "PR" | "CR" | "HR" => region_suffix(c, rule, &mut pool, key, t.col)?,
            "shared" | "euAccess" => output(c, &mut pool, key)?,
            "GA" => {
                return Err(Issue::new(
                    t.col,
                    "`GA` is a condition of deny entries, and a deny entry has no fallbacks",
                ));
            }
            _ => return Err(Issue::new(t.col, unknown(key))),
        }
        seen.push(if key == "HR" { "CR" } else { key });
        if !list_continues(c)? {
            return Ok(pool);
        }
    }
}

fn unknown(key: &str) -> String {
    let hint = match key {
        "S" => " (`S` is a KEB output; in the Seed syntax write `shared`)".to_string(),
        "EU" => " (`EU` is a KEB output; in the Seed syntax write `euAccess`)".to_string(),
        "deny" => " (`deny` follows the attribute list: `PLAN(PR=...) deny`)".to_string(),
        _ => did_you_mean(key, ATTRS),
    };
    format!(
        "unknown attribute `{key}`{hint}; attributes are PR, CR (or HR), GA (deny entries), shared and euAccess"
    )
}

/// `=<value>` or `=*` after a region key.
fn region(c: &mut Cursor<'_>, key: &str) -> Result<Cond, Issue> {
    if c.peek_kind() == Some(Kind::NotEq) {
        return Err(Issue::new(
            c.col(),
            format!("`{key}` takes `=` only; `!=` is for global accounts (`GA!=<id>`)"),
        ));
    }
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

/// A flag: bare (`true`) or `=<one of allowed>`; returns the value as written.
fn flag<'a>(c: &mut Cursor<'_>, key: &str, allowed: &[&'a str]) -> Result<&'a str, Issue> {
    if !c.eat(Kind::Eq) {
        return Ok("true");
    }
    let col = c.col();
    let written = match c.peek_kind() {
        Some(Kind::Word(w)) => Some(w),
        Some(Kind::Star) => Some("*"),
        _ => None,
    };
    if let Some(v) = written.and_then(|w| allowed.iter().find(|a| **a == w)) {
        c.bump();
        return Ok(v);
    }
    let list: Vec<String> = allowed.iter().map(|a| format!("`{a}`")).collect();
    let (last, rest) = list
        .split_last()
        .map_or(("", &[][..]), |(l, r)| (l.as_str(), r));
    Err(Issue::new(
        col,
        format!("`{key}` takes {} or {last}", rest.join(", ")),
    ))
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
        let p = &r.pools[0];
        assert!(p.pr_suffix && p.cr_suffix && p.shared);
        assert_eq!(p.eu_access, EuAccess::FromRequest);
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
        assert!(
            err("aws(shared=yes)")
                .message
                .contains("`true`, `false` or `fallback`")
        );
        assert!(
            err("aws(euAccess=no)")
                .message
                .contains("`true`, `false` or `*`")
        );
        assert!(err("aws(,)").message.contains("empty attribute"));
        assert!(err("aws(PR=a,)").message.contains("empty attribute"));
        assert!(err("a ws").message.contains("after the plan name"));
    }

    #[test]
    fn ordered_fallbacks() {
        let p = parse("gcp(PR=cf-sa30) | () | (shared=fallback, euAccess=false)").unwrap();
        let r = p.rule;
        assert_eq!(r.pools.len(), 3);
        assert!(r.pools[0].pr_suffix && !r.pools[1].pr_suffix);
        assert!(r.pools[2].shared && r.pools[2].shared_fallback);
        assert_eq!(p.pref_cols, vec![1, 17, 22]);
        let r = parse("aws(PR=*, euAccess) | (euAccess) | (PR, euAccess)")
            .unwrap()
            .rule;
        assert_eq!(r.pools[1].eu_access, EuAccess::Always);
        assert!(r.pools[2].pr_suffix);
    }

    #[test]
    fn fallback_errors_point_at_the_culprit() {
        let e = err("gcp(PR=a) | (CR)");
        assert_eq!(e.col, 14);
        assert!(e.message.contains("does not require"), "{}", e.message);
        assert!(
            err("gcp(PR=a) | (PR=b)")
                .message
                .contains("conditions go in the head")
        );
        assert!(
            err("gcp | gcp(shared)")
                .message
                .contains("not the plan again")
        );
        assert_eq!(err("gcp |").col, 5);
        assert_eq!(err("gcp | shared").col, 5);
        assert!(err("gcp | shared").message.contains("starts a fallback"));
        assert!(
            err("gcp | (shared, shared)")
                .message
                .contains("already set")
        );
        assert!(err("gcp | (S)").message.contains("KEB output"));
        assert!(err("gcp | () x").message.contains("after a fallback"));
    }

    #[test]
    fn deny_with_and_without_message() {
        let r = parse("aws(PR=cf-eu11) deny").unwrap().rule;
        assert!(r.is_deny() && r.deny_message.is_none());
        assert_eq!(r.pr, Cond::Exact("cf-eu11".into()));
        let r = parse(r#"aws deny "frozen: \"x\"""#).unwrap().rule;
        assert_eq!(r.deny_message.as_deref(), Some(r#"frozen: "x""#));
        let e = err("aws(PR=a, shared) deny");
        assert_eq!(e.col, 11);
        assert!(e.message.contains("no pool"));
        assert!(err("aws deny | ()").message.contains("no fallbacks"));
        assert!(err(r#"aws deny "x" y"#).message.contains("after `deny`"));
        assert!(err(r#"aws deny "x"#).message.contains("closing"));
        assert!(
            err("aws(deny)")
                .message
                .contains("follows the attribute list")
        );
    }

    #[test]
    fn global_account_conditions_on_deny_entries() {
        use super::super::model::TenantCond;
        let r = parse(r#"trial(PR=*, GA=Ga-2|ga-1|GA-1) deny "no {plan} for {globalAccount}""#)
            .unwrap()
            .rule;
        assert_eq!(r.ga, TenantCond::In(vec!["ga-1".into(), "ga-2".into()]));
        assert_eq!(
            r.to_seed().as_deref(),
            Some(r#"trial(PR=*, GA=ga-1|ga-2) deny "no {plan} for {globalAccount}""#)
        );
        let r = parse("trial(GA!=ga-x) deny").unwrap().rule;
        assert_eq!(r.ga, TenantCond::NotIn(vec!["ga-x".into()]));
        // Upstream's comma list: the comma separates attributes here, so it is pointed at.
        let e = err("trial(GA=a,b) deny");
        assert_eq!(e.col, 11);
        assert!(e.message.contains("separated by `|`"), "{}", e.message);
        // A real attribute after the comma is fine.
        assert!(parse("trial(GA=a, PR=x) deny").is_ok());
        let e = err("trial(GA=a)");
        assert_eq!(e.col, 7);
        assert!(e.message.contains("only a deny entry"), "{}", e.message);
        assert!(
            err("trial(GA=a, GA!=b) deny")
                .message
                .contains("one of `GA=` and `GA!=`")
        );
        assert!(err("trial(GA=) deny").message.contains("GA is empty"));
        assert!(err("trial(GA=a|) deny").message.contains("after `|`"));
        assert!(
            err("trial(GA) deny")
                .message
                .contains("needs global accounts")
        );
        assert!(err("trial(PR!=a) deny").message.contains("`!=`"));
        assert!(err("trial | (GA)").message.contains("no fallbacks"));
    }
}
