//! `?filter=` expressions on list endpoints, in the syntax of Nomad's
//! go-bexpr: `Status == "running" and Meta["team"] contains "web"`.
//!
//! Expressions are evaluated over the JSON a list answers with, so every
//! field a user sees can be filtered on by the name they see.
//!
//! Grammar (lowest precedence first):
//! ```text
//! expr   := and ("or" and)*
//! and    := unary ("and" unary)*
//! unary  := "not" unary | "(" expr ")" | match
//! match  := selector ("==" | "!=") value
//!         | selector ["not"] ("contains" | "matches") value
//!         | value ["not"] "in" selector
//!         | selector "is" ["not"] "empty"
//! selector := ident ("." ident | "[" string "]")*
//! value  := "string" | `raw string` | number | true | false
//! ```

use serde_json::Value;

/// A parsed filter, ready to test many values.
#[derive(Clone, Debug)]
pub struct Filter(Expr);

/// How large a filter may be. Parsing recurses once per `not` and `(`,
/// so the depth bound is what keeps a hostile filter from overflowing the
/// stack; `and`/`or` chains are kept flat and cost no depth.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FilterLimits {
    /// Bytes of the expression.
    pub max_bytes: usize,
    /// Nesting of parentheses and `not`.
    pub max_depth: usize,
}

impl Default for FilterLimits {
    fn default() -> Self {
        FilterLimits {
            max_bytes: 4096,
            max_depth: 32,
        }
    }
}

#[derive(Clone, Debug)]
enum Expr {
    /// Any of the terms (never fewer than two).
    Or(Vec<Expr>),
    /// All of the terms (never fewer than two).
    And(Vec<Expr>),
    Not(Box<Expr>),
    Match(Match),
}

#[derive(Clone, Debug)]
enum Match {
    Equal(Vec<String>, Literal),
    NotEqual(Vec<String>, Literal),
    Contains(Vec<String>, Literal),
    Matches(Vec<String>, regex::Regex),
    In(Literal, Vec<String>),
    Empty(Vec<String>),
}

#[derive(Clone, Debug, PartialEq)]
enum Literal {
    Str(String),
    Num(f64),
    Bool(bool),
}

#[derive(Clone, Debug, PartialEq)]
enum Token {
    Ident(String),
    Str(String),
    Num(f64),
    Op(&'static str),
    LParen,
    RParen,
    LBracket,
    RBracket,
    Dot,
}

/// Why a filter could not be read; shown to the user as a 400.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("failed to read filter expression: {0}")]
pub struct FilterError(String);

impl Filter {
    /// Parses `text` within the default [`FilterLimits`].
    pub fn parse(text: &str) -> Result<Filter, FilterError> {
        Filter::parse_with_limits(text, &FilterLimits::default())
    }

    pub fn parse_with_limits(text: &str, limits: &FilterLimits) -> Result<Filter, FilterError> {
        if text.len() > limits.max_bytes {
            return Err(FilterError(format!(
                "the expression is {} bytes long, more than the limit of {} (limits.filter_max_bytes)",
                text.len(),
                limits.max_bytes
            )));
        }
        let tokens = tokenize(text)?;
        let mut p = Parser {
            tokens,
            pos: 0,
            depth: 0,
            max_depth: limits.max_depth,
        };
        let expr = p.expr()?;
        if p.pos != p.tokens.len() {
            return Err(FilterError(format!(
                "unexpected {:?} after a complete expression",
                p.tokens[p.pos]
            )));
        }
        Ok(Filter(expr))
    }

    /// Whether `value` (one list entry as JSON) passes the filter.
    pub fn matches(&self, value: &Value) -> bool {
        eval(&self.0, value)
    }
}

fn tokenize(text: &str) -> Result<Vec<Token>, FilterError> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            ' ' | '\t' | '\n' | '\r' => i += 1,
            '(' => push(&mut out, &mut i, Token::LParen),
            ')' => push(&mut out, &mut i, Token::RParen),
            '[' => push(&mut out, &mut i, Token::LBracket),
            ']' => push(&mut out, &mut i, Token::RBracket),
            '.' => push(&mut out, &mut i, Token::Dot),
            '=' | '!' => {
                if chars.get(i + 1) != Some(&'=') {
                    return Err(FilterError(format!("expected '{c}=' at offset {i}")));
                }
                out.push(Token::Op(if c == '=' { "==" } else { "!=" }));
                i += 2;
            }
            '"' => {
                let (s, next) = read_quoted(&chars, i)?;
                out.push(Token::Str(s));
                i = next;
            }
            '`' => {
                let end = chars[i + 1..]
                    .iter()
                    .position(|c| *c == '`')
                    .ok_or_else(|| FilterError(format!("unterminated `string` at offset {i}")))?;
                out.push(Token::Str(chars[i + 1..i + 1 + end].iter().collect()));
                i += end + 2;
            }
            c if c.is_ascii_digit() || c == '-' => {
                let start = i;
                i += 1;
                // A '.' belongs to the number only when a digit follows, so
                // `Groups.0.Name` reads as a path.
                while i < chars.len()
                    && (chars[i].is_ascii_digit()
                        || (chars[i] == '.' && chars.get(i + 1).is_some_and(char::is_ascii_digit)))
                {
                    i += 1;
                }
                let s: String = chars[start..i].iter().collect();
                let n = s
                    .parse::<f64>()
                    .map_err(|_| FilterError(format!("bad number {s:?} at offset {start}")))?;
                out.push(Token::Num(n));
            }
            c if c.is_alphabetic() || c == '_' => {
                let start = i;
                while i < chars.len()
                    && (chars[i].is_alphanumeric() || chars[i] == '_' || chars[i] == '-')
                {
                    i += 1;
                }
                out.push(Token::Ident(chars[start..i].iter().collect()));
            }
            other => return Err(FilterError(format!("unexpected {other:?} at offset {i}"))),
        }
    }
    Ok(out)
}

fn push(out: &mut Vec<Token>, i: &mut usize, t: Token) {
    out.push(t);
    *i += 1;
}

fn read_quoted(chars: &[char], start: usize) -> Result<(String, usize), FilterError> {
    let mut s = String::new();
    let mut i = start + 1;
    while i < chars.len() {
        match chars[i] {
            '"' => return Ok((s, i + 1)),
            '\\' if i + 1 < chars.len() => {
                s.push(match chars[i + 1] {
                    'n' => '\n',
                    't' => '\t',
                    other => other,
                });
                i += 2;
            }
            c => {
                s.push(c);
                i += 1;
            }
        }
    }
    Err(FilterError(format!(
        "unterminated string at offset {start}"
    )))
}

struct Parser {
    tokens: Vec<Token>,
    pos: usize,
    /// `not`s and parentheses open at this point.
    depth: usize,
    max_depth: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.pos)
    }

    fn peek_word(&self, word: &str) -> bool {
        matches!(self.peek(), Some(Token::Ident(w)) if w == word)
    }

    fn next(&mut self) -> Option<Token> {
        let t = self.tokens.get(self.pos).cloned();
        self.pos += 1;
        t
    }

    fn expect_word(&mut self, word: &str) -> Result<(), FilterError> {
        if self.peek_word(word) {
            self.pos += 1;
            Ok(())
        } else {
            Err(FilterError(format!(
                "expected {word:?}, found {:?}",
                self.peek()
            )))
        }
    }

    fn expr(&mut self) -> Result<Expr, FilterError> {
        let mut terms = vec![self.and()?];
        while self.peek_word("or") {
            self.pos += 1;
            terms.push(self.and()?);
        }
        Ok(one_or(terms, Expr::Or))
    }

    fn and(&mut self) -> Result<Expr, FilterError> {
        let mut terms = vec![self.unary()?];
        while self.peek_word("and") {
            self.pos += 1;
            terms.push(self.unary()?);
        }
        Ok(one_or(terms, Expr::And))
    }

    fn unary(&mut self) -> Result<Expr, FilterError> {
        if self.peek_word("not") {
            self.pos += 1;
            let inner = self.nested(Parser::unary)?;
            return Ok(Expr::Not(Box::new(inner)));
        }
        if self.peek() == Some(&Token::LParen) {
            self.pos += 1;
            let e = self.nested(Parser::expr)?;
            if self.next() != Some(Token::RParen) {
                return Err(FilterError("missing ')'".into()));
            }
            return Ok(e);
        }
        self.matcher()
    }

    /// Parses one level deeper, within the depth limit.
    fn nested(
        &mut self,
        parse: fn(&mut Parser) -> Result<Expr, FilterError>,
    ) -> Result<Expr, FilterError> {
        if self.depth >= self.max_depth {
            return Err(FilterError(format!(
                "parentheses and `not` nest deeper than {} levels (limits.filter_max_depth)",
                self.max_depth
            )));
        }
        self.depth += 1;
        let e = parse(self);
        self.depth -= 1;
        e
    }

    fn matcher(&mut self) -> Result<Expr, FilterError> {
        // `value [not] in selector` starts with a literal.
        if let Some(lit) = self.literal_here() {
            self.pos += 1;
            let negate = self.peek_word("not");
            if negate {
                self.pos += 1;
            }
            self.expect_word("in")?;
            let sel = self.selector()?;
            return Ok(maybe_not(negate, Match::In(lit, sel)));
        }
        let sel = self.selector()?;
        match self.next() {
            Some(Token::Op("==")) => Ok(Expr::Match(Match::Equal(sel, self.literal()?))),
            Some(Token::Op("!=")) => Ok(Expr::Match(Match::NotEqual(sel, self.literal()?))),
            Some(Token::Ident(w)) if w == "is" => {
                let negate = self.peek_word("not");
                if negate {
                    self.pos += 1;
                }
                self.expect_word("empty")?;
                Ok(maybe_not(negate, Match::Empty(sel)))
            }
            Some(Token::Ident(w)) if w == "contains" => {
                Ok(Expr::Match(Match::Contains(sel, self.literal()?)))
            }
            Some(Token::Ident(w)) if w == "matches" => self.matches(sel, false),
            Some(Token::Ident(w)) if w == "not" => match self.next() {
                Some(Token::Ident(w)) if w == "contains" => {
                    Ok(maybe_not(true, Match::Contains(sel, self.literal()?)))
                }
                Some(Token::Ident(w)) if w == "matches" => self.matches(sel, true),
                other => Err(FilterError(format!(
                    "expected contains or matches after not, found {other:?}"
                ))),
            },
            other => Err(FilterError(format!(
                "expected an operator (==, !=, contains, matches, in, is empty) after {}, found {other:?}",
                sel.join(".")
            ))),
        }
    }

    fn matches(&mut self, sel: Vec<String>, negate: bool) -> Result<Expr, FilterError> {
        let Literal::Str(pattern) = self.literal()? else {
            return Err(FilterError("matches needs a string pattern".into()));
        };
        let re = regex::Regex::new(&pattern)
            .map_err(|e| FilterError(format!("bad regular expression {pattern:?}: {e}")))?;
        Ok(maybe_not(negate, Match::Matches(sel, re)))
    }

    fn literal_here(&self) -> Option<Literal> {
        match self.peek()? {
            Token::Str(s) => Some(Literal::Str(s.clone())),
            Token::Num(n) => Some(Literal::Num(*n)),
            _ => None,
        }
    }

    fn literal(&mut self) -> Result<Literal, FilterError> {
        match self.next() {
            Some(Token::Str(s)) => Ok(Literal::Str(s)),
            Some(Token::Num(n)) => Ok(Literal::Num(n)),
            Some(Token::Ident(w)) if w == "true" => Ok(Literal::Bool(true)),
            Some(Token::Ident(w)) if w == "false" => Ok(Literal::Bool(false)),
            other => Err(FilterError(format!(
                "expected a value (\"string\", number, true, false), found {other:?}"
            ))),
        }
    }

    fn selector(&mut self) -> Result<Vec<String>, FilterError> {
        let mut path = match self.next() {
            Some(Token::Ident(w)) => vec![w],
            other => {
                return Err(FilterError(format!(
                    "expected a field name, found {other:?}"
                )))
            }
        };
        loop {
            match self.peek() {
                Some(Token::Dot) => {
                    self.pos += 1;
                    match self.next() {
                        Some(Token::Ident(w)) => path.push(w),
                        Some(Token::Num(n)) if n >= 0.0 && n.fract() == 0.0 => {
                            path.push((n as u64).to_string())
                        }
                        other => {
                            return Err(FilterError(format!(
                                "expected a field name after '.', found {other:?}"
                            )))
                        }
                    }
                }
                Some(Token::LBracket) => {
                    self.pos += 1;
                    let key = match self.next() {
                        Some(Token::Str(s)) => s,
                        other => {
                            return Err(FilterError(format!(
                                "expected a quoted key in [...], found {other:?}"
                            )))
                        }
                    };
                    if self.next() != Some(Token::RBracket) {
                        return Err(FilterError("missing ']'".into()));
                    }
                    path.push(key);
                }
                _ => return Ok(path),
            }
        }
    }
}

/// A single term as itself, several joined by `join`.
fn one_or(mut terms: Vec<Expr>, join: fn(Vec<Expr>) -> Expr) -> Expr {
    if terms.len() == 1 {
        terms.remove(0)
    } else {
        join(terms)
    }
}

fn maybe_not(negate: bool, m: Match) -> Expr {
    let e = Expr::Match(m);
    if negate {
        Expr::Not(Box::new(e))
    } else {
        e
    }
}

fn eval(e: &Expr, v: &Value) -> bool {
    match e {
        Expr::Or(terms) => terms.iter().any(|t| eval(t, v)),
        Expr::And(terms) => terms.iter().all(|t| eval(t, v)),
        Expr::Not(a) => !eval(a, v),
        Expr::Match(m) => eval_match(m, v),
    }
}

fn select<'a>(v: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(v, |cur, key| match cur {
        Value::Object(map) => map.get(key),
        Value::Array(items) => key.parse::<usize>().ok().and_then(|i| items.get(i)),
        _ => None,
    })
}

fn equals(v: &Value, lit: &Literal) -> bool {
    match (v, lit) {
        (Value::String(s), Literal::Str(l)) => s == l,
        (Value::Number(n), Literal::Num(l)) => n.as_f64() == Some(*l),
        (Value::Number(n), Literal::Str(l)) => l.parse::<f64>().ok() == n.as_f64(),
        (Value::Bool(b), Literal::Bool(l)) => b == l,
        (Value::Bool(b), Literal::Str(l)) => l.parse::<bool>().ok() == Some(*b),
        _ => false,
    }
}

fn contains(v: &Value, lit: &Literal) -> bool {
    match v {
        Value::String(s) => matches!(lit, Literal::Str(l) if s.contains(l.as_str())),
        Value::Array(items) => items.iter().any(|i| equals(i, lit)),
        Value::Object(map) => matches!(lit, Literal::Str(l) if map.contains_key(l)),
        _ => false,
    }
}

fn eval_match(m: &Match, v: &Value) -> bool {
    match m {
        Match::Equal(sel, lit) => select(v, sel).is_some_and(|x| equals(x, lit)),
        Match::NotEqual(sel, lit) => !select(v, sel).is_some_and(|x| equals(x, lit)),
        Match::Contains(sel, lit) => select(v, sel).is_some_and(|x| contains(x, lit)),
        Match::In(lit, sel) => select(v, sel).is_some_and(|x| contains(x, lit)),
        Match::Matches(sel, re) => {
            matches!(select(v, sel), Some(Value::String(s)) if re.is_match(s))
        }
        Match::Empty(sel) => match select(v, sel) {
            None | Some(Value::Null) => true,
            Some(Value::String(s)) => s.is_empty(),
            Some(Value::Array(a)) => a.is_empty(),
            Some(Value::Object(o)) => o.is_empty(),
            Some(_) => false,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn job() -> Value {
        json!({
            "ID": "web", "Status": "running", "Priority": 50, "Stop": false,
            "Datacenters": ["dc1", "dc2"], "Meta": {"team": "platform"},
            "TaskGroups": [{"Name": "frontend"}], "ParentID": ""
        })
    }

    fn check(expr: &str) -> bool {
        Filter::parse(expr).unwrap().matches(&job())
    }

    #[test]
    fn comparisons_and_logic() {
        assert!(check(r#"Status == "running""#));
        assert!(!check(r#"Status != "running""#));
        assert!(check("Priority == 50 and Stop == false"));
        assert!(check(r#"Status == "dead" or Priority == 50"#));
        assert!(check(r#"not (Status == "dead")"#));
        assert!(!check(r#"Status == "running" and not Priority == 50"#));
    }

    #[test]
    fn collections_maps_and_regexps() {
        assert!(check(r#""dc2" in Datacenters"#));
        assert!(check(r#""dc3" not in Datacenters"#));
        assert!(check(r#"Datacenters contains "dc1""#));
        assert!(check(r#"Meta["team"] == "platform""#));
        assert!(check(r#"Meta.team matches "^plat""#));
        assert!(check(r#"Meta not contains "owner""#));
        assert!(check("ParentID is empty"));
        assert!(check("Meta is not empty"));
        assert!(check(r#"TaskGroups.0.Name == "frontend""#));
        assert!(check("ID == `web`"));
    }

    #[test]
    fn bad_expressions_explain_themselves() {
        for bad in [
            "Status =",
            r#"Status = "x""#,
            r#"Status == "running" and"#,
            r#"(Status == "x""#,
            r#"Name matches "([""#,
            r#"Status ~ "x""#,
        ] {
            let err = Filter::parse(bad).unwrap_err().to_string();
            assert!(
                err.starts_with("failed to read filter expression"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn hostile_filters_are_refused_not_overflowing_the_stack() {
        // A few thousand `(` or `not ` once overflowed the stack of the
        // HTTP worker and aborted the server.
        for hostile in [
            "(".repeat(3000),
            "not ".repeat(1000) + "Status == \"x\"",
            "(".repeat(40) + "Status == \"x\"" + &")".repeat(40),
        ] {
            let err = Filter::parse(&hostile).unwrap_err().to_string();
            assert!(err.contains("limits.filter_"), "{err}");
        }
        // Long and/or chains are flat: no depth, and still evaluated.
        let chain = vec!["Status == \"x\""; 200].join(" or ") + " or Status == \"running\"";
        assert!(Filter::parse(&chain).unwrap().matches(&job()));
        let limits = FilterLimits {
            max_bytes: 100_000,
            max_depth: 32,
        };
        let long = vec!["Status == \"running\""; 4000].join(" and ");
        assert!(Filter::parse_with_limits(&long, &limits)
            .unwrap()
            .matches(&job()));
        // The deepest filter allowed parses and evaluates.
        let deepest = "not ".repeat(31) + "(Status == \"running\")";
        assert!(!Filter::parse(&deepest).unwrap().matches(&job()));
    }
}
