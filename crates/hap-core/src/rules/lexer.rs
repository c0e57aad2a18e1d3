//! Tokenizer shared by the Seed and KEB parsers: words, punctuation, the `->` arrow, the `|`
//! between ordered preferences and quoted deny messages, each with its 1-based character column
//! so that every parse error can point at the culprit.

/// Kinds of token. A word is a run of `[A-Za-z0-9._-]` (a `-` directly followed by `>` is the
/// arrow instead); any other non-blank character is `Other` and becomes a parse error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind<'a> {
    Word(&'a str),
    LParen,
    RParen,
    Comma,
    Eq,
    /// `!=`, which only a global-account condition takes (`GA!=a|b`).
    NotEq,
    Star,
    Arrow,
    /// `|` between the ordered pool preferences of one entry.
    Bar,
    /// A double-quoted message; `raw` is the text between the quotes with escapes unresolved,
    /// `closed` whether the closing quote was found.
    Str {
        raw: &'a str,
        closed: bool,
    },
    Other(char),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Token<'a> {
    pub kind: Kind<'a>,
    /// 1-based character column of the first character.
    pub col: usize,
    /// Whether whitespace separates this token from the previous one.
    pub spaced: bool,
}

impl Token<'_> {
    /// How the token reads in messages.
    pub fn describe(&self) -> String {
        match self.kind {
            Kind::Word(w) => format!("`{w}`"),
            Kind::LParen => "`(`".into(),
            Kind::RParen => "`)`".into(),
            Kind::Comma => "`,`".into(),
            Kind::Eq => "`=`".into(),
            Kind::NotEq => "`!=`".into(),
            Kind::Star => "`*`".into(),
            Kind::Arrow => "`->`".into(),
            Kind::Bar => "`|`".into(),
            Kind::Str { .. } => "a quoted message".into(),
            Kind::Other(c) => format!("`{}`", c.escape_debug()),
        }
    }
}

fn is_word_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')
}

/// Splits an entry into tokens; never fails, unknown characters become `Kind::Other`.
pub fn lex(input: &str) -> Vec<Token<'_>> {
    let mut tokens = Vec::new();
    let mut chars = input.char_indices().enumerate().peekable();
    let mut spaced = false;
    while let Some((ci, (bi, c))) = chars.next() {
        let col = ci + 1;
        if c.is_whitespace() {
            spaced = true;
            continue;
        }
        let next = chars.peek().map(|(_, (_, n))| *n);
        let kind = match c {
            '-' if next == Some('>') => {
                chars.next();
                Kind::Arrow
            }
            '!' if next == Some('=') => {
                chars.next();
                Kind::NotEq
            }
            '(' => Kind::LParen,
            ')' => Kind::RParen,
            ',' => Kind::Comma,
            '=' => Kind::Eq,
            '*' => Kind::Star,
            '|' => Kind::Bar,
            '"' => {
                // A backslash escapes the next character, so `\"` does not end the message.
                let start = bi + 1;
                let mut end = input.len();
                let mut closed = false;
                let mut escaped = false;
                for (_, (nbi, n)) in chars.by_ref() {
                    if escaped {
                        escaped = false;
                    } else if n == '\\' {
                        escaped = true;
                    } else if n == '"' {
                        end = nbi;
                        closed = true;
                        break;
                    }
                }
                Kind::Str {
                    raw: &input[start..end],
                    closed,
                }
            }
            c if is_word_char(c) => {
                let mut end = bi + c.len_utf8();
                while let Some(&(_, (nbi, n))) = chars.peek() {
                    let arrow_next = n == '-' && input[nbi + 1..].starts_with('>');
                    if !is_word_char(n) || arrow_next {
                        break;
                    }
                    end = nbi + n.len_utf8();
                    chars.next();
                }
                Kind::Word(&input[bi..end])
            }
            other => Kind::Other(other),
        };
        tokens.push(Token { kind, col, spaced });
        spaced = false;
    }
    tokens
}

/// 1-based column just past the last character, where "expected more" errors point.
pub fn end_col(input: &str) -> usize {
    input.chars().count() + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(s: &str) -> Vec<Kind<'_>> {
        lex(s).into_iter().map(|t| t.kind).collect()
    }

    #[test]
    fn arrow_ends_a_word_even_without_spaces() {
        assert_eq!(
            kinds("aws->S"),
            vec![Kind::Word("aws"), Kind::Arrow, Kind::Word("S")]
        );
        assert_eq!(kinds("cf-eu11"), vec![Kind::Word("cf-eu11")]);
    }

    #[test]
    fn columns_count_characters_not_bytes() {
        let t = lex("é(PR=x)");
        assert_eq!(t[0].kind, Kind::Other('é'));
        assert_eq!(t[1].col, 2);
    }

    #[test]
    fn messages_and_bars() {
        assert_eq!(
            kinds(r#"aws deny "a \" | b" | x"#),
            vec![
                Kind::Word("aws"),
                Kind::Word("deny"),
                Kind::Str {
                    raw: r#"a \" | b"#,
                    closed: true
                },
                Kind::Bar,
                Kind::Word("x")
            ]
        );
        assert_eq!(
            kinds(r#"x "open"#),
            vec![
                Kind::Word("x"),
                Kind::Str {
                    raw: "open",
                    closed: false
                }
            ]
        );
        // Columns after a message count its characters.
        assert_eq!(lex(r#""é" |"#)[1].col, 5);
    }

    #[test]
    fn not_equal_is_one_token_and_a_lone_bang_is_foreign() {
        assert_eq!(
            kinds("GA!=a|b"),
            vec![
                Kind::Word("GA"),
                Kind::NotEq,
                Kind::Word("a"),
                Kind::Bar,
                Kind::Word("b")
            ]
        );
        assert_eq!(kinds("a!b")[1], Kind::Other('!'));
    }

    #[test]
    fn spacing_is_recorded() {
        let t = lex("a ws");
        assert!(!t[0].spaced && t[1].spaced);
    }
}
