//! Parser of the KEB syntax (docs/design.md §2.2): `PLAN[(PR=v[,HR=v])] [-> OUT[,OUT...]]`, matching
//! upstream's grammar and error cases except `*` (any value here) and text after `)` (an error).
//! Extended (docs/rules.md §2.4) by ordered fallbacks, `-> OUTS | OUTS | -` (`-`: no outputs,
//! `SF`: a shared pool accepted as the fallback of a dedicated one), and by
//! `-> DENY ["message"]`; upstream has neither, so no upstream entry changes meaning.

use super::lexer::{Kind, Token};
use super::model::{Cond, EuAccess, PoolResult, Rule};
use super::parse::{
    Cursor, Issue, ParseResult, Parsed, did_you_mean, message, only_deny_names_tenants,
    reject_foreign, tenant_cond,
};

/// Parses one KEB entry.
pub fn parse(input: &str) -> ParseResult {
    let mut c = Cursor::new(input);
    reject_foreign(&c)?;
    structure(c.tokens())?;
    let mut warnings = Vec::new();
    let plan_col = c.col();
    let plan = words(&mut c, "the plan name", &mut warnings);
    if plan.is_empty() {
        let found = c
            .peek()
            .map(|t| format!(", found {}", t.describe()))
            .unwrap_or_default();
        return Err(Issue::new(plan_col, format!("plan name is empty{found}")));
    }
    let mut rule = Rule::plain(plan);
    if c.eat(Kind::LParen) {
        inputs(&mut c, &mut rule, &mut warnings)?;
        if let Some(t) = c.peek().filter(|t| t.kind != Kind::Arrow) {
            return Err(Issue::new(
                t.col,
                format!(
                    "unexpected {} after `)`: only `-> OUTPUTS` may follow (upstream KEB silently glues such text onto the last value)",
                    t.describe()
                ),
            ));
        }
    }
    let mut pref_cols = vec![plan_col];
    match c.bump() {
        None => {}
        Some(t) if t.kind == Kind::Arrow => {
            pref_cols = preferences(&mut c, &mut rule, &mut warnings, plan_col)?;
        }
        Some(t) => {
            return Err(Issue::new(
                t.col,
                format!(
                    "unexpected {} after the plan name; expected `(` or `->`",
                    t.describe()
                ),
            ));
        }
    }
    only_deny_names_tenants(&c, &rule)?;
    Ok(Parsed {
        rule,
        plan_col,
        pref_cols,
        warnings,
    })
}

/// Everything after `->`: `DENY ["message"]`, or output lists separated by `|`. Returns the
/// column of each preference (the plan for the first, then each `|`).
fn preferences(
    c: &mut Cursor<'_>,
    rule: &mut Rule,
    warnings: &mut Vec<Issue>,
    plan_col: usize,
) -> Result<Vec<usize>, Issue> {
    if c.eat(Kind::Word("DENY")) {
        rule.pools.clear();
        if let Some(m) = c.peek()
            && let Kind::Str { raw, closed } = m.kind
        {
            c.bump();
            rule.deny_message = Some(message(raw, closed, m.col)?);
        }
        return match c.peek() {
            None => Ok(Vec::new()),
            Some(n) => Err(Issue::new(
                n.col,
                format!(
                    "unexpected {} after `DENY`: a deny entry has no other outputs and no fallbacks, only an optional message in double quotes",
                    n.describe()
                ),
            )),
        };
    }
    let mut cols = vec![plan_col];
    rule.pools[0] = outputs(c, warnings, true)?;
    while let Some(bar) = c.bump() {
        cols.push(bar.col);
        let pool = outputs(c, warnings, false)?;
        rule.pools.push(pool);
    }
    Ok(cols)
}

/// Upstream's structural checks, which run before anything else.
fn structure(tokens: &[Token<'_>]) -> Result<(), Issue> {
    let nth = |k: Kind<'_>, n: usize| tokens.iter().filter(|t| t.kind == k).nth(n).map(|t| t.col);
    if let Some(col) = nth(Kind::Arrow, 1) {
        return Err(Issue::new(col, "rule has more than one arrow `->`"));
    }
    if let Some(col) = nth(Kind::LParen, 1) {
        return Err(Issue::new(col, "rule has more than one `(`"));
    }
    if let Some(col) = nth(Kind::RParen, 1) {
        return Err(Issue::new(col, "rule has more than one `)`"));
    }
    match (nth(Kind::LParen, 0), nth(Kind::RParen, 0)) {
        (Some(col), None) => Err(Issue::new(
            col,
            "rule has not balanced parentheses: `(` without `)`",
        )),
        (None, Some(col)) => Err(Issue::new(
            col,
            "rule has not balanced parentheses: `)` without `(`",
        )),
        (Some(open), Some(close)) if close < open => Err(Issue::new(
            close,
            "rule has not balanced parentheses: `)` before `(`",
        )),
        _ => Ok(()),
    }
}

/// Consecutive words glued together, as upstream deletes all whitespace first; warns when that
/// joins words a reader would take as separate.
fn words<'a>(c: &mut Cursor<'a>, what: &str, warnings: &mut Vec<Issue>) -> String {
    let mut out = String::new();
    let mut first_col = None;
    while let Some(Token {
        kind: Kind::Word(w),
        col,
        spaced,
    }) = c.peek()
    {
        if first_col.is_some() && spaced {
            warnings.push(Issue::new(
                col,
                format!("whitespace inside {what} is removed, as upstream KEB does"),
            ));
        }
        first_col.get_or_insert(col);
        out.push_str(w);
        c.bump();
    }
    out
}

fn inputs(c: &mut Cursor<'_>, rule: &mut Rule, warnings: &mut Vec<Issue>) -> Result<(), Issue> {
    if let Some(t) = c.peek().filter(|t| t.kind == Kind::RParen) {
        return Err(Issue::new(
            t.col,
            "input attribute is empty: `PLAN()` has no inputs, write the plan without parentheses",
        ));
    }
    loop {
        input(c, rule, warnings)?;
        match c.bump() {
            Some(t) if t.kind == Kind::Comma => {}
            Some(t) if t.kind == Kind::RParen => return Ok(()),
            Some(t) => {
                return Err(Issue::new(
                    t.col,
                    format!("expected `,` or `)`, found {}", t.describe()),
                ));
            }
            None => return Err(Issue::new(c.end(), "missing `)`")),
        }
    }
}

fn input(c: &mut Cursor<'_>, rule: &mut Rule, warnings: &mut Vec<Issue>) -> Result<(), Issue> {
    let col = c.col();
    if matches!(c.peek_kind(), Some(Kind::Comma | Kind::RParen) | None) {
        return Err(Issue::new(col, "input attribute is empty"));
    }
    let key = words(c, "an attribute name", warnings);
    if key == "GA" {
        if !rule.ga.is_absent() {
            return Err(Issue::new(
                col,
                "GlobalAccount (GA) already set (an entry takes one of `GA=` and `GA!=`)",
            ));
        }
        rule.ga = tenant_cond(c, &["PR", "HR", "GA"])?;
        return Ok(());
    }
    if !c.eat(Kind::Eq) {
        let what = if key.is_empty() {
            c.peek().map(|t| t.describe()).unwrap_or_default()
        } else {
            format!("`{key}`")
        };
        return Err(Issue::new(
            col,
            format!("input attribute {what} has no value: write `PR=<region>` or `HR=<region>`"),
        ));
    }
    let (slot, name) = match key.as_str() {
        "PR" => (&mut rule.pr, "PlatformRegion (PR)"),
        "HR" => (&mut rule.cr, "HyperscalerRegion (HR)"),
        "" => return Err(Issue::new(col, "input attribute has no name before `=`")),
        _ => return Err(Issue::new(col, unknown_input(&key))),
    };
    if !slot.is_absent() {
        return Err(Issue::new(col, format!("{name} already set")));
    }
    let value_col = c.col();
    *slot = match c.peek_kind() {
        Some(Kind::Star) => {
            c.bump();
            warnings.push(Issue::new(
                value_col,
                format!(
                    "`{key}=*` matches any region here; upstream KEB reads `*` as the literal region `*`, so upstream this entry matches no real request"
                ),
            ));
            Cond::Any
        }
        Some(Kind::Word(_)) => Cond::Exact(words(c, "a value", warnings)),
        _ => return Err(Issue::new(value_col, format!("{name} is empty"))),
    };
    match c.peek() {
        Some(t) if t.kind == Kind::Eq => {
            Err(Issue::new(t.col, "input attribute has more than one `=`"))
        }
        Some(t) if matches!(t.kind, Kind::Star | Kind::Word(_)) => Err(Issue::new(
            t.col,
            "`*` must be the whole value: a region is `*` or a name without `*`",
        )),
        _ => Ok(()),
    }
}

fn unknown_input(key: &str) -> String {
    let hint = match key {
        "CR" => " (the KEB syntax calls the cluster region `HR`)".to_string(),
        "EU" | "S" => format!(" (`{key}` is an output: write it after `->`)"),
        _ => did_you_mean(key, ["PR", "HR", "GA"]),
    };
    format!("unknown attribute `{key}`{hint}; inputs are PR, HR and GA (deny entries)")
}

/// After `-`: nothing, or the `|` of the next preference (`dash`: the column of the `-`).
fn dash_alone(c: &Cursor<'_>, dash: usize) -> Result<(), Issue> {
    match c.peek() {
        None
        | Some(Token {
            kind: Kind::Bar, ..
        }) => Ok(()),
        Some(n) => Err(Issue::new(
            n.col,
            format!(
                "`-` stands for a preference without outputs and stands alone; found {} after it (column {dash})",
                n.describe(),
            ),
        )),
    }
}

/// Where an output was expected and none came: said in the words for what came instead.
fn empty_output(c: &Cursor<'_>, col: usize, first: bool) -> Issue {
    match c.peek() {
        Some(t) if t.kind == Kind::Bar && !first => Issue::new(
            t.col,
            "output attribute is empty: write `-` for a fallback without outputs",
        ),
        Some(t) if t.kind != Kind::Comma => Issue::new(
            t.col,
            format!(
                "expected an output (EU, S, SF, PR, HR), found {}",
                t.describe()
            ),
        ),
        _ => Issue::new(col, "output attribute is empty"),
    }
}

/// The long name of an output, for messages; an unknown one is refused with a hint.
fn output_long_name(name: &str, col: usize) -> Result<&'static str, Issue> {
    Ok(match name {
        "EU" => "EuAccess",
        "S" | "SF" => "Shared",
        "PR" => "PlatformRegionSuffix",
        "HR" => "HyperscalerRegionSuffix",
        _ => {
            let hint = match name {
                "DENY" => " (`DENY` stands alone right after `->`)".to_string(),
                _ => did_you_mean(name, ["EU", "S", "SF", "PR", "HR"]),
            };
            return Err(Issue::new(
                col,
                format!("unknown attribute `{name}`{hint}; outputs are EU, S, SF, PR and HR"),
            ));
        }
    })
}

/// One preference's outputs up to the next `|` (consumed by the caller) or the end; `-` alone
/// stands for no outputs. `first`: this is the primary, where upstream's empty-output error
/// applies as written.
fn outputs(
    c: &mut Cursor<'_>,
    warnings: &mut Vec<Issue>,
    first: bool,
) -> Result<PoolResult, Issue> {
    let mut pool = PoolResult::default();
    if let Some(t) = c.peek().filter(|t| t.kind == Kind::Word("-")) {
        c.bump();
        return dash_alone(c, t.col).map(|()| pool);
    }
    let mut seen: Vec<String> = Vec::new();
    loop {
        let col = c.col();
        let name = words(c, "an output", warnings);
        if name.is_empty() {
            return Err(empty_output(c, col, first));
        }
        let name = name.as_str();
        let long = output_long_name(name, col)?;
        let key = if name == "SF" { "S" } else { name };
        if let Some(prev) = seen
            .iter()
            .find(|s| s.as_str() == key || (key == "S" && s == &"SF"))
        {
            let what = if prev == name {
                format!("`{name}` appears twice")
            } else {
                "`S` and `SF` both say shared".to_string()
            };
            return Err(Issue::new(col, format!("{long} already set ({what})")));
        }
        seen.push(name.to_string());
        match name {
            "EU" => pool.eu_access = EuAccess::Always,
            "S" => pool.shared = true,
            "SF" => (pool.shared, pool.shared_fallback) = (true, true),
            "PR" => pool.pr_suffix = true,
            _ => pool.cr_suffix = true,
        }
        match c.peek() {
            None => return Ok(pool),
            Some(t) if t.kind == Kind::Bar => return Ok(pool),
            Some(t) if t.kind == Kind::Comma => {
                c.bump();
            }
            Some(t) if t.kind == Kind::Eq => {
                return Err(Issue::new(t.col, "outputs take no values"));
            }
            Some(t) => {
                return Err(Issue::new(
                    t.col,
                    format!("expected `,` between outputs, found {}", t.describe()),
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_inputs_and_outputs_in_any_order() {
        let r = parse("gcp(HR=us1,PR=cf-sa30)->HR,PR,S,EU").unwrap().rule;
        assert_eq!(r.pr, Cond::Exact("cf-sa30".into()));
        assert_eq!(r.cr, Cond::Exact("us1".into()));
        let p = &r.pools[0];
        assert!(p.pr_suffix && p.cr_suffix && p.shared && p.eu_access == EuAccess::Always);
    }

    #[test]
    fn whitespace_is_deleted_like_upstream_with_a_warning() {
        let p = parse("a ws(PR=cf-eu 11) -> EU").unwrap();
        assert_eq!(p.rule.plan, "aws");
        assert_eq!(p.rule.pr, Cond::Exact("cf-eu11".into()));
        assert_eq!(p.warnings.len(), 2);
    }

    #[test]
    fn star_is_any_with_a_warning() {
        let p = parse("sap-converged-cloud(HR=*)->S").unwrap();
        assert_eq!(p.rule.cr, Cond::Any);
        assert!(p.warnings[0].message.contains("literal"));
    }

    #[test]
    fn ordered_fallbacks_and_deny() {
        let p = parse("gcp(PR=cf-sa30) -> PR | - | SF").unwrap();
        assert_eq!(p.rule.pools.len(), 3);
        assert!(p.rule.pools[0].pr_suffix);
        assert_eq!(p.rule.pools[1], PoolResult::default());
        assert!(p.rule.pools[2].shared_fallback && p.rule.pools[2].shared);
        assert_eq!(p.pref_cols, vec![1, 23, 27]);
        let p = parse("aws -> - | EU").unwrap();
        assert_eq!(p.rule.pools[1].eu_access, EuAccess::Always);
        let r = parse(r#"aws(PR=cf-eu11) -> DENY "frozen | for now""#)
            .unwrap()
            .rule;
        assert!(r.is_deny());
        assert_eq!(r.deny_message.as_deref(), Some("frozen | for now"));
        assert!(parse("aws -> DENY").unwrap().rule.is_deny());
    }

    #[test]
    fn fallback_errors() {
        let e = |s: &str| parse(s).unwrap_err();
        assert!(e("aws -> EU |").message.contains("empty"));
        assert!(e("aws -> EU | | S").message.contains("write `-`"));
        assert!(e("aws -> S,SF").message.contains("both say shared"));
        assert!(e("aws -> DENY,S").message.contains("after `DENY`"));
        assert!(e("aws -> EU | DENY").message.contains("stands alone"));
        assert!(e("aws -> - S").message.contains("stands alone"));
        assert!(e(r#"aws -> DENY "x"#).message.contains("closing"));
    }

    #[test]
    fn global_account_conditions_on_deny_entries() {
        use super::super::model::TenantCond;
        let r = parse(r#"trial(PR=cf-eu10,GA!=GA-1|ga-2)->DENY"closed for {globalAccount}""#)
            .unwrap()
            .rule;
        assert_eq!(r.ga, TenantCond::NotIn(vec!["ga-1".into(), "ga-2".into()]));
        assert_eq!(
            r.to_keb().as_deref(),
            Some(r#"trial(PR=cf-eu10,GA!=ga-1|ga-2) -> DENY "closed for {globalAccount}""#)
        );
        let e = parse("trial(GA=a,b) -> DENY").unwrap_err();
        assert_eq!(e.col, 11);
        assert!(e.message.contains("separated by `|`"), "{}", e.message);
        assert!(parse("trial(GA=a,HR=x) -> DENY").is_ok());
        assert!(
            parse("trial(GA=a) -> S")
                .unwrap_err()
                .message
                .contains("only a deny entry")
        );
        assert!(
            parse("trial(GA=a,GA!=b) -> DENY")
                .unwrap_err()
                .message
                .contains("already set")
        );
    }
}
