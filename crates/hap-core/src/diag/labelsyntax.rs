//! Kubernetes label key and value syntax, as one-line reasons: a leaf with no imports, so the
//! rule parsers (and the fuzz build that compiles them alone) can use it.

/// Why `value` is not a valid label value, or `None` when it is.
pub fn label_value_problem(value: &str) -> Option<String> {
    let len = value.chars().count();
    if value.is_empty() {
        return Some("which is empty".into());
    }
    if len > 63 {
        return Some(format!(
            "which is {len} characters long; a label value has at most 63"
        ));
    }
    if !value
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        return Some(
            "which is not a valid label value (letters, digits, `-`, `_` and `.` only)".into(),
        );
    }
    let ends_ok = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    if !ends_ok(value.chars().next()) || !ends_ok(value.chars().last()) {
        return Some(
            "which is not a valid label value (it must begin and end with a letter or digit)"
                .into(),
        );
    }
    None
}

/// Why `key` is not a valid qualified label key, or `None`.
pub fn label_key_problem(key: &str) -> Option<String> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix {
        let dns_ok = !p.is_empty()
            && p.len() <= 253
            && p.split('.').all(|l| {
                !l.is_empty()
                    && l.bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                    && !l.starts_with('-')
                    && !l.ends_with('-')
            });
        if !dns_ok {
            return Some(format!("prefix `{p}` is not a DNS subdomain"));
        }
    }
    label_value_problem(name).map(|p| format!("name `{name}` {p}"))
}
