//! A small engine for Go's text/template syntax, as consul-template (and so
//! Nomad's `template` block) reads it: text and `{{ }}` actions with custom
//! delimiters and `{{-`/`-}}` trimming, comments, pipelines with `|`,
//! variables (`$x := ...`, `$x = ...`), `if`/`else if`/`else`, `range`
//! (with `$i, $e :=`), `with`, fields (`.A.B`, `$x.A`), literals and
//! parenthesised pipelines.
//!
//! Values are JSON values. Functions are called through [`Funcs`] (see
//! `funcs.rs`), so the engine knows nothing of the task or the servers.
//! Everything a template costs is bounded ([`Limits`]): its size, the depth
//! of its nesting, the output, and the steps (actions and loop iterations)
//! it may run, so a template from a job cannot hold a client.

use serde_json::Value;
use std::collections::BTreeMap;

/// How much a template may cost.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub max_source_bytes: usize,
    pub max_depth: usize,
    pub max_output_bytes: usize,
    pub max_steps: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_source_bytes: 1 << 20,
            max_depth: 64,
            max_output_bytes: 4 << 20,
            max_steps: 1_000_000,
        }
    }
}

/// Why a template could not be parsed or rendered; the message names the
/// place and the cause as a user can fix it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct TemplateError(pub String);

fn err<T>(msg: impl Into<String>) -> Result<T, TemplateError> {
    Err(TemplateError(msg.into()))
}

/// The functions a template may call. `call` answers `None` for a name it
/// does not know, which refuses the template.
pub trait Funcs {
    fn call(&mut self, name: &str, args: Vec<Value>) -> Option<Result<Value, String>>;
}

// ---- lexing -------------------------------------------------------------

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Dot,
    /// `.A.B`
    Field(Vec<String>),
    /// `$x.A.B` (`$` alone is the name "").
    Var(String, Vec<String>),
    /// `.A.B` right after a `)`: fields of a parenthesised pipeline.
    Chain(Vec<String>),
    Ident(String), // function or keyword
    Str(String),
    Int(i64),
    Float(f64),
    Pipe,
    LParen,
    RParen,
    Declare, // :=
    Assign,  // =
    Comma,
}

fn lex_action(src: &str, line: usize) -> Result<Vec<Tok>, TemplateError> {
    let chars: Vec<char> = src.chars().collect();
    let mut toks = Vec::new();
    let mut i = 0;
    let bad = |m: String| TemplateError(format!("line {line}: {m}"));
    while i < chars.len() {
        let c = chars[i];
        let single = match c {
            '|' => Some(Tok::Pipe),
            '(' => Some(Tok::LParen),
            ')' => Some(Tok::RParen),
            ',' => Some(Tok::Comma),
            '=' => Some(Tok::Assign),
            _ => None,
        };
        if let Some(tok) = single {
            toks.push(tok);
            i += 1;
            continue;
        }
        match c {
            c if c.is_whitespace() => i += 1,
            ':' if chars.get(i + 1) == Some(&'=') => {
                toks.push(Tok::Declare);
                i += 2
            }
            '"' => {
                let (s, next) =
                    lex_quoted(&chars, i + 1).ok_or_else(|| bad("unterminated string".into()))?;
                toks.push(Tok::Str(s));
                i = next
            }
            '`' => {
                let end = chars[i + 1..]
                    .iter()
                    .position(|c| *c == '`')
                    .ok_or_else(|| bad("unterminated raw string".into()))?;
                toks.push(Tok::Str(chars[i + 1..i + 1 + end].iter().collect()));
                i += end + 2
            }
            '.' | '$' => {
                let after_paren = i > 0 && chars[i - 1] == ')';
                let (name, mut path, next) = lex_path(&chars, i);
                i = next;
                toks.push(match c {
                    '$' => Tok::Var(name, path),
                    _ if name.is_empty() => Tok::Dot,
                    _ => {
                        path.insert(0, name);
                        if after_paren {
                            Tok::Chain(path)
                        } else {
                            Tok::Field(path)
                        }
                    }
                });
            }
            c if c.is_ascii_digit()
                || (c == '-' && chars.get(i + 1).is_some_and(|d| d.is_ascii_digit())) =>
            {
                let j = scan(&chars, i + 1, |d| d.is_ascii_alphanumeric() || d == '.');
                let text: String = chars[i..j].iter().collect();
                toks.push(parse_number(&text).ok_or_else(|| bad(format!("bad number {text:?}")))?);
                i = j
            }
            c if c.is_alphabetic() || c == '_' => {
                let j = scan(&chars, i, |d| d.is_alphanumeric() || d == '_');
                toks.push(Tok::Ident(chars[i..j].iter().collect()));
                i = j
            }
            other => return Err(bad(format!("unexpected {other:?} in action"))),
        }
    }
    Ok(toks)
}

/// Where the run of characters from `from` that `keep` accepts ends.
fn scan(chars: &[char], from: usize, keep: impl Fn(char) -> bool) -> usize {
    chars[from.min(chars.len())..]
        .iter()
        .position(|c| !keep(*c))
        .map_or(chars.len(), |n| from + n)
}

/// A name after `.` or `$` at `start`, then the `.field`s written right
/// after it; answers the name, the fields and where lexing goes on.
fn lex_path(chars: &[char], start: usize) -> (String, Vec<String>, usize) {
    let word = |from: usize| {
        let mut j = from;
        while j < chars.len() && (chars[j].is_alphanumeric() || chars[j] == '_') {
            j += 1;
        }
        (chars[from..j].iter().collect::<String>(), j)
    };
    let (name, mut i) = word(start + 1);
    let mut path = Vec::new();
    while i < chars.len() && chars[i] == '.' {
        let (field, next) = word(i + 1);
        if field.is_empty() {
            break;
        }
        path.push(field);
        i = next;
    }
    (name, path, i)
}

fn lex_quoted(chars: &[char], mut i: usize) -> Option<(String, usize)> {
    let mut s = String::new();
    while i < chars.len() {
        match chars[i] {
            '"' => return Some((s, i + 1)),
            '\\' => {
                let e = *chars.get(i + 1)?;
                s.push(match e {
                    'n' => '\n',
                    't' => '\t',
                    'r' => '\r',
                    '0' => '\0',
                    other => other,
                });
                i += 2
            }
            c => {
                s.push(c);
                i += 1
            }
        }
    }
    None
}

fn parse_number(text: &str) -> Option<Tok> {
    if let Some(hex) = text.strip_prefix("0x") {
        return i64::from_str_radix(hex, 16).ok().map(Tok::Int);
    }
    if let Ok(n) = text.parse::<i64>() {
        return Some(Tok::Int(n));
    }
    text.parse::<f64>().ok().map(Tok::Float)
}

// ---- parsing ------------------------------------------------------------

#[derive(Clone, Debug)]
enum Arg {
    Dot,
    Field(Box<Arg>, Vec<String>),
    Var(String),
    Lit(Value),
    Func(String),
    Sub(Pipeline),
}

#[derive(Clone, Debug, Default)]
struct Pipeline {
    decl: Vec<String>,
    assign: bool,
    cmds: Vec<Vec<Arg>>,
}

#[derive(Clone, Debug)]
enum Node {
    Text(String),
    Action(Pipeline),
    If(Pipeline, Vec<Node>, Vec<Node>),
    Range(Pipeline, Vec<Node>, Vec<Node>),
    With(Pipeline, Vec<Node>, Vec<Node>),
}

/// A parsed template, ready to render any number of times.
#[derive(Clone, Debug)]
pub struct Template {
    nodes: Vec<Node>,
    limits: Limits,
}

enum Piece {
    Text(String),
    Action(Vec<Tok>, usize),
}

fn split_pieces(src: &str, left: &str, right: &str) -> Result<Vec<Piece>, TemplateError> {
    let mut pieces = Vec::new();
    let mut rest = src;
    let mut line = 1;
    let mut trim_next = false;
    while let Some(open) = rest.find(left) {
        let mut text = &rest[..open];
        if trim_next {
            text = text.trim_start();
        }
        let after = &rest[open + left.len()..];
        let trim_left =
            after.starts_with("- ") || after.starts_with("-\t") || after.starts_with("-\n");
        if trim_left {
            text = text.trim_end();
        }
        line += rest[..open].matches('\n').count();
        pieces.push(Piece::Text(text.to_string()));
        let body_start = if trim_left { 1 } else { 0 };
        let close = after
            .find(right)
            .ok_or_else(|| TemplateError(format!("line {line}: unclosed action")))?;
        let mut body = &after[body_start..close];
        trim_next = body.ends_with(" -") || body.ends_with("\t-") || body.ends_with("\n-");
        if trim_next {
            body = &body[..body.len() - 1];
        }
        let trimmed = body.trim();
        if !(trimmed.starts_with("/*") && trimmed.ends_with("*/")) {
            pieces.push(Piece::Action(lex_action(body, line)?, line));
        }
        line += after[..close].matches('\n').count();
        rest = &after[close + right.len()..];
    }
    let text = if trim_next { rest.trim_start() } else { rest };
    pieces.push(Piece::Text(text.to_string()));
    Ok(pieces)
}

struct Parser {
    pieces: std::vec::IntoIter<Piece>,
    depth: usize,
    max_depth: usize,
}

/// How a list of nodes ended.
enum ListEnd {
    Eof,
    EndAction,
    Else(Vec<Tok>, usize),
}

impl Template {
    /// Parses `src` with the given delimiters.
    pub fn parse(
        src: &str,
        left: &str,
        right: &str,
        limits: Limits,
    ) -> Result<Self, TemplateError> {
        if src.len() > limits.max_source_bytes {
            return err(format!(
                "template is {} bytes, more than the {} allowed",
                src.len(),
                limits.max_source_bytes
            ));
        }
        if left.is_empty() || right.is_empty() {
            return err("template delimiters cannot be empty");
        }
        let mut p = Parser {
            pieces: split_pieces(src, left, right)?.into_iter(),
            depth: 0,
            max_depth: limits.max_depth,
        };
        let (nodes, end) = p.list()?;
        match end {
            ListEnd::Eof => Ok(Template { nodes, limits }),
            ListEnd::EndAction => err("unexpected {{end}}"),
            ListEnd::Else(_, line) => err(format!("line {line}: unexpected {{{{else}}}}")),
        }
    }

    /// Renders with `.` bound to `data`.
    pub fn render(&self, data: &Value, funcs: &mut dyn Funcs) -> Result<String, TemplateError> {
        let mut ex = Exec {
            funcs,
            out: String::new(),
            vars: vec![("$".to_string(), data.clone())],
            steps: 0,
            limits: self.limits,
        };
        ex.nodes(&self.nodes, data)?;
        Ok(ex.out)
    }
}

impl Parser {
    fn list(&mut self) -> Result<(Vec<Node>, ListEnd), TemplateError> {
        self.depth += 1;
        if self.depth > self.max_depth {
            return err(format!(
                "template nests deeper than {} levels",
                self.max_depth
            ));
        }
        let mut nodes = Vec::new();
        let end = loop {
            let Some(piece) = self.pieces.next() else {
                break ListEnd::Eof;
            };
            let (toks, line) = match piece {
                Piece::Text(t) => {
                    if !t.is_empty() {
                        nodes.push(Node::Text(t));
                    }
                    continue;
                }
                Piece::Action(toks, line) => (toks, line),
            };
            match toks.first() {
                Some(Tok::Ident(k)) if k == "end" => break ListEnd::EndAction,
                Some(Tok::Ident(k)) if k == "else" => {
                    break ListEnd::Else(toks[1..].to_vec(), line)
                }
                Some(Tok::Ident(k)) if matches!(k.as_str(), "if" | "range" | "with") => {
                    let kind = k.clone();
                    nodes.push(self.block(&kind, &toks[1..], line)?);
                }
                Some(Tok::Ident(k))
                    if matches!(
                        k.as_str(),
                        "define" | "template" | "block" | "break" | "continue"
                    ) =>
                {
                    return err(format!("line {line}: {{{{{k}}}}} is not supported"));
                }
                None => return err(format!("line {line}: empty action")),
                _ => nodes.push(Node::Action(pipeline(&toks, line)?)),
            }
        };
        self.depth -= 1;
        Ok((nodes, end))
    }

    fn block(&mut self, kind: &str, toks: &[Tok], line: usize) -> Result<Node, TemplateError> {
        let pipe = pipeline(toks, line)?;
        let (body, end) = self.list()?;
        let otherwise = match end {
            ListEnd::Eof => return err(format!("line {line}: {{{{{kind}}}}} has no {{{{end}}}}")),
            ListEnd::EndAction => Vec::new(),
            ListEnd::Else(rest, else_line) if rest.is_empty() => match self.list()? {
                (nodes, ListEnd::EndAction) => nodes,
                _ => return err(format!("line {else_line}: {{{{else}}}} has no {{{{end}}}}")),
            },
            // `else if ...` / `else with ...`: a nested block sharing the end.
            ListEnd::Else(rest, else_line) => match rest.first() {
                Some(Tok::Ident(k)) if k == "if" || k == "with" => {
                    let k = k.clone();
                    vec![self.block(&k, &rest[1..], else_line)?]
                }
                _ => return err(format!("line {else_line}: unexpected words after else")),
            },
        };
        Ok(match kind {
            "if" => Node::If(pipe, body, otherwise),
            "range" => Node::Range(pipe, body, otherwise),
            _ => Node::With(pipe, body, otherwise),
        })
    }
}

fn pipeline(toks: &[Tok], line: usize) -> Result<Pipeline, TemplateError> {
    let mut p = Pipeline::default();
    let mut rest = toks;
    // `$x :=`, `$x =` or `$i, $e :=`
    let decl_end = toks
        .iter()
        .position(|t| matches!(t, Tok::Declare | Tok::Assign));
    if let Some(at) = decl_end {
        let names: Vec<String> = toks[..at]
            .iter()
            .filter(|t| !matches!(t, Tok::Comma))
            .map(|t| match t {
                Tok::Var(v, path) if path.is_empty() => Ok(format!("${v}")),
                _ => err(format!("line {line}: only variables can be declared")),
            })
            .collect::<Result<_, _>>()?;
        if names.is_empty() || names.len() > 2 {
            return err(format!("line {line}: bad variable declaration"));
        }
        p.assign = matches!(toks[at], Tok::Assign);
        p.decl = names;
        rest = &toks[at + 1..];
    }
    p.cmds = split_top_level(rest, line)?;
    if p.cmds.iter().any(Vec::is_empty) {
        return err(format!("line {line}: missing command in pipeline"));
    }
    Ok(p)
}

fn split_top_level(toks: &[Tok], line: usize) -> Result<Vec<Vec<Arg>>, TemplateError> {
    let mut cmds = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, t) in toks.iter().enumerate() {
        match t {
            Tok::LParen => depth += 1,
            Tok::RParen => depth -= 1,
            Tok::Pipe if depth == 0 => {
                cmds.push(command(&toks[start..i], line)?);
                start = i + 1;
            }
            _ => {}
        }
    }
    cmds.push(command(&toks[start..], line)?);
    Ok(cmds)
}

fn command(toks: &[Tok], line: usize) -> Result<Vec<Arg>, TemplateError> {
    let mut args = Vec::new();
    let mut i = 0;
    while i < toks.len() {
        let arg = match &toks[i] {
            Tok::Dot => Arg::Dot,
            Tok::Field(path) => Arg::Field(Box::new(Arg::Dot), path.clone()),
            Tok::Var(v, path) if path.is_empty() => Arg::Var(format!("${v}")),
            Tok::Var(v, path) => Arg::Field(Box::new(Arg::Var(format!("${v}"))), path.clone()),
            Tok::Str(s) => Arg::Lit(Value::String(s.clone())),
            Tok::Int(n) => Arg::Lit(Value::from(*n)),
            Tok::Float(n) => {
                Arg::Lit(serde_json::Number::from_f64(*n).map_or(Value::Null, Value::Number))
            }
            Tok::Ident(k) if k == "true" || k == "false" => Arg::Lit(Value::Bool(k == "true")),
            Tok::Ident(k) if k == "nil" => Arg::Lit(Value::Null),
            Tok::Ident(k) => Arg::Func(k.clone()),
            Tok::LParen => {
                let close = matching_paren(toks, i)
                    .ok_or_else(|| TemplateError(format!("line {line}: unclosed (")))?;
                let sub = Arg::Sub(pipeline(&toks[i + 1..close], line)?);
                i = close;
                match toks.get(close + 1) {
                    Some(Tok::Chain(path)) => {
                        i += 1;
                        Arg::Field(Box::new(sub), path.clone())
                    }
                    _ => sub,
                }
            }
            other => return err(format!("line {line}: unexpected {other:?}")),
        };
        i += 1;
        args.push(arg);
    }
    Ok(args)
}

fn matching_paren(toks: &[Tok], open: usize) -> Option<usize> {
    let mut depth = 0;
    for (i, t) in toks.iter().enumerate().skip(open) {
        match t {
            Tok::LParen => depth += 1,
            Tok::RParen => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

// ---- execution ----------------------------------------------------------

struct Exec<'a> {
    funcs: &'a mut dyn Funcs,
    out: String,
    vars: Vec<(String, Value)>,
    steps: u64,
    limits: Limits,
}

impl Exec<'_> {
    fn step(&mut self) -> Result<(), TemplateError> {
        self.steps += 1;
        if self.steps > self.limits.max_steps {
            return err(format!(
                "template ran more than {} steps",
                self.limits.max_steps
            ));
        }
        Ok(())
    }

    fn write(&mut self, s: &str) -> Result<(), TemplateError> {
        if self.out.len() + s.len() > self.limits.max_output_bytes {
            return err(format!(
                "template output is larger than {} bytes",
                self.limits.max_output_bytes
            ));
        }
        self.out.push_str(s);
        Ok(())
    }

    fn nodes(&mut self, nodes: &[Node], dot: &Value) -> Result<(), TemplateError> {
        let scope = self.vars.len();
        for n in nodes {
            self.step()?;
            self.node(n, dot)?;
        }
        self.vars.truncate(scope);
        Ok(())
    }

    fn node(&mut self, node: &Node, dot: &Value) -> Result<(), TemplateError> {
        match node {
            Node::Text(t) => self.write(t),
            Node::Action(p) => {
                let v = self.pipeline(p, dot)?;
                if p.decl.is_empty() {
                    self.write(&print_value(&v))?;
                }
                Ok(())
            }
            Node::If(p, yes, no) => {
                let v = self.pipeline(p, dot)?;
                self.nodes(if truthy(&v) { yes } else { no }, dot)
            }
            Node::With(p, yes, no) => {
                let v = self.pipeline(p, dot)?;
                if truthy(&v) {
                    self.nodes(yes, &v)
                } else {
                    self.nodes(no, dot)
                }
            }
            Node::Range(p, body, otherwise) => self.range(p, body, otherwise, dot),
        }
    }

    fn range(
        &mut self,
        p: &Pipeline,
        body: &[Node],
        otherwise: &[Node],
        dot: &Value,
    ) -> Result<(), TemplateError> {
        let mut bare = p.clone();
        let names = std::mem::take(&mut bare.decl);
        let v = self.pipeline(&bare, dot)?;
        let items: Vec<(Value, Value)> = match v {
            Value::Array(a) => a
                .into_iter()
                .enumerate()
                .map(|(i, e)| (Value::from(i), e))
                .collect(),
            Value::Object(m) => m.into_iter().map(|(k, e)| (Value::String(k), e)).collect(),
            Value::Number(n) if n.as_i64().is_some() => (0..n.as_i64().unwrap_or(0).max(0))
                .map(|i| (Value::from(i), Value::from(i)))
                .collect(),
            Value::Null => Vec::new(),
            other => return err(format!("range can't iterate over {}", print_value(&other))),
        };
        if items.is_empty() {
            return self.nodes(otherwise, dot);
        }
        for (key, elem) in items {
            self.step()?;
            let scope = self.vars.len();
            match names.as_slice() {
                [e] => self.vars.push((e.clone(), elem.clone())),
                [k, e] => {
                    self.vars.push((k.clone(), key));
                    self.vars.push((e.clone(), elem.clone()));
                }
                _ => {}
            }
            self.nodes(body, &elem)?;
            self.vars.truncate(scope);
        }
        Ok(())
    }

    fn pipeline(&mut self, p: &Pipeline, dot: &Value) -> Result<Value, TemplateError> {
        let mut last: Option<Value> = None;
        for cmd in &p.cmds {
            last = Some(self.command(cmd, dot, last)?);
        }
        let v = last.unwrap_or(Value::Null);
        if let Some(name) = p.decl.first() {
            if p.assign {
                let slot = self.vars.iter_mut().rev().find(|(n, _)| n == name);
                match slot {
                    Some(slot) => slot.1 = v.clone(),
                    None => return err(format!("undefined variable {name}")),
                }
            } else {
                self.vars.push((name.clone(), v.clone()));
            }
        }
        Ok(v)
    }

    fn command(
        &mut self,
        cmd: &[Arg],
        dot: &Value,
        piped: Option<Value>,
    ) -> Result<Value, TemplateError> {
        self.step()?;
        let (first, rest) = match cmd.split_first() {
            Some(split) => split,
            None => return err("empty command"),
        };
        if let Arg::Func(name) = first {
            let mut args = rest
                .iter()
                .map(|a| self.arg(a, dot))
                .collect::<Result<Vec<_>, _>>()?;
            args.extend(piped);
            return self.call(name, args);
        }
        if !rest.is_empty() || piped.is_some() {
            return err("can't give arguments to a non-function");
        }
        self.arg(first, dot)
    }

    fn arg(&mut self, a: &Arg, dot: &Value) -> Result<Value, TemplateError> {
        match a {
            Arg::Dot => Ok(dot.clone()),
            Arg::Lit(v) => Ok(v.clone()),
            Arg::Var(name) => self
                .vars
                .iter()
                .rev()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.clone())
                .ok_or_else(|| TemplateError(format!("undefined variable {name}"))),
            Arg::Func(name) => self.call(name, Vec::new()),
            Arg::Sub(p) => self.pipeline(p, dot),
            Arg::Field(base, fields) => {
                let mut v = self.arg(base, dot)?;
                for f in fields {
                    v = match v {
                        Value::Object(mut m) => m.remove(f).unwrap_or(Value::Null),
                        Value::Null => Value::Null,
                        other => {
                            return err(format!(
                                "can't evaluate field {f} in {}",
                                print_value(&other)
                            ))
                        }
                    };
                }
                Ok(v)
            }
        }
    }

    fn call(&mut self, name: &str, args: Vec<Value>) -> Result<Value, TemplateError> {
        if let Some(v) = builtin(name, &args) {
            return v.map_err(|e| TemplateError(format!("{name}: {e}")));
        }
        match self.funcs.call(name, args) {
            Some(result) => result.map_err(|e| TemplateError(format!("{name}: {e}"))),
            None => err(format!("function {name:?} not defined")),
        }
    }
}

/// Go's own template functions (text/template's builtins).
fn builtin(name: &str, args: &[Value]) -> Option<Result<Value, String>> {
    let cmp = |want: fn(std::cmp::Ordering) -> bool| -> Result<Value, String> {
        match args {
            [a, b] => compare(a, b).map(|o| Value::Bool(want(o))),
            _ => Err("needs two arguments".into()),
        }
    };
    Some(match name {
        "and" => Ok(args
            .iter()
            .find(|a| !truthy(a))
            .or(args.last())
            .cloned()
            .unwrap_or(Value::Null)),
        "or" => Ok(args
            .iter()
            .find(|a| truthy(a))
            .or(args.last())
            .cloned()
            .unwrap_or(Value::Null)),
        "not" => Ok(Value::Bool(!args.first().is_some_and(truthy))),
        "len" => match args.first() {
            Some(Value::String(s)) => Ok(Value::from(s.len())),
            Some(Value::Array(a)) => Ok(Value::from(a.len())),
            Some(Value::Object(m)) => Ok(Value::from(m.len())),
            _ => Err("len of a value that has none".into()),
        },
        "index" => index(args),
        "print" => Ok(Value::String(args.iter().map(print_value).collect())),
        "println" => Ok(Value::String(
            args.iter().map(print_value).collect::<Vec<_>>().join(" ") + "\n",
        )),
        "printf" => match args.split_first() {
            Some((Value::String(f), rest)) => sprintf(f, rest).map(Value::String),
            _ => Err("needs a format string".into()),
        },
        "eq" => match args.split_first() {
            Some((a, rest)) if !rest.is_empty() => Ok(Value::Bool(
                rest.iter()
                    .any(|b| compare(a, b) == Ok(std::cmp::Ordering::Equal)),
            )),
            _ => Err("needs at least two arguments".into()),
        },
        "ne" => cmp(|o| o != std::cmp::Ordering::Equal),
        "lt" => cmp(|o| o == std::cmp::Ordering::Less),
        "le" => cmp(|o| o != std::cmp::Ordering::Greater),
        "gt" => cmp(|o| o == std::cmp::Ordering::Greater),
        "ge" => cmp(|o| o != std::cmp::Ordering::Less),
        _ => return None,
    })
}

fn index(args: &[Value]) -> Result<Value, String> {
    let (first, keys) = args.split_first().ok_or("needs a value to index")?;
    let mut v = first.clone();
    for k in keys {
        v = match (v, k) {
            (Value::Array(a), Value::Number(n)) => {
                let i = n
                    .as_u64()
                    .and_then(|i| usize::try_from(i).ok())
                    .ok_or("index out of range")?;
                a.get(i)
                    .cloned()
                    .ok_or(format!("index out of range: {i}"))?
            }
            (Value::Object(mut m), Value::String(s)) => m.remove(s).unwrap_or(Value::Null),
            (Value::Null, _) => Value::Null,
            (other, k) => {
                return Err(format!(
                    "can't index {} with {}",
                    print_value(&other),
                    print_value(k)
                ))
            }
        };
    }
    Ok(v)
}

fn compare(a: &Value, b: &Value) -> Result<std::cmp::Ordering, String> {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            let (x, y) = (x.as_f64().unwrap_or(0.0), y.as_f64().unwrap_or(0.0));
            x.partial_cmp(&y)
                .ok_or_else(|| "can't compare NaN".to_string())
        }
        (Value::String(x), Value::String(y)) => Ok(x.cmp(y)),
        (Value::Bool(x), Value::Bool(y)) => Ok(x.cmp(y)),
        (Value::Null, Value::Null) => Ok(std::cmp::Ordering::Equal),
        _ => Err(format!(
            "incompatible types for comparison: {} and {}",
            print_value(a),
            print_value(b)
        )),
    }
}

/// Go's notion of an empty value: false, 0, "", nil, empty list or map.
pub fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64() != Some(0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(m) => !m.is_empty(),
    }
}

/// A value as Go's template prints it (`{{ . }}`).
pub fn print_value(v: &Value) -> String {
    match v {
        Value::Null => "<no value>".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => s.clone(),
        Value::Array(a) => format!(
            "[{}]",
            a.iter().map(print_value).collect::<Vec<_>>().join(" ")
        ),
        Value::Object(m) => {
            let sorted: BTreeMap<&String, &Value> = m.iter().collect();
            let parts: Vec<String> = sorted
                .iter()
                .map(|(k, v)| format!("{k}:{}", print_value(v)))
                .collect();
            format!("map[{}]", parts.join(" "))
        }
    }
}

/// Go's `fmt.Sprintf` for the verbs templates use: `%s %v %d %q %f %x %t
/// %%`, with an optional width and precision (`%5.2f`, `%-8s`, `%03d`).
pub fn sprintf(format: &str, args: &[Value]) -> Result<String, String> {
    let mut out = String::new();
    let mut args = args.iter();
    let mut chars = format.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let mut spec = String::new();
        while let Some(&d) = chars.peek() {
            if d.is_ascii_digit() || d == '.' || d == '-' || d == '+' {
                spec.push(d);
                chars.next();
            } else {
                break;
            }
        }
        let Some(verb) = chars.next() else {
            out.push_str("%!(NOVERB)");
            break;
        };
        if verb == '%' {
            out.push('%');
            continue;
        }
        let Some(arg) = args.next() else {
            out.push_str(&format!("%!{verb}(MISSING)"));
            continue;
        };
        let text = match verb {
            's' | 'v' => print_value(arg),
            'q' => serde_json::to_string(&print_value(arg)).unwrap_or_default(),
            't' => print_value(arg),
            'd' => match arg.as_i64() {
                Some(n) => n.to_string(),
                None => format!("%!d({})", print_value(arg)),
            },
            'x' => match arg {
                Value::Number(n) if n.as_i64().is_some() => {
                    format!("{:x}", n.as_i64().unwrap_or(0))
                }
                other => print_value(other)
                    .bytes()
                    .map(|b| format!("{b:02x}"))
                    .collect(),
            },
            'f' => {
                let prec = spec
                    .split_once('.')
                    .and_then(|(_, p)| p.parse().ok())
                    .unwrap_or(6);
                match arg.as_f64() {
                    Some(f) => format!("{f:.prec$}"),
                    None => format!("%!f({})", print_value(arg)),
                }
            }
            other => return Err(format!("unsupported verb %{other}")),
        };
        out.push_str(&pad(&text, &spec));
    }
    Ok(out)
}

fn pad(text: &str, spec: &str) -> String {
    let left = spec.starts_with('-');
    let zero = spec.starts_with('0');
    let width: usize = spec
        .trim_start_matches(['-', '+', '0'])
        .split('.')
        .next()
        .and_then(|w| w.parse().ok())
        .unwrap_or(0);
    let len = text.chars().count();
    if len >= width {
        return text.to_string();
    }
    let fill = width - len;
    if left {
        format!("{text}{}", " ".repeat(fill))
    } else if zero {
        format!("{}{text}", "0".repeat(fill))
    } else {
        format!("{}{text}", " ".repeat(fill))
    }
}
