//! Evaluating HCL expressions into JSON values, within the file's limits.
//!
//! herder evaluates every expression itself, on `hcl-edit`'s syntax tree:
//! literals, lists, objects, string templates with their `%{ if }` and
//! `%{ for }` directives, variables and traversals (`var.x`, `local.y[0]`,
//! splats), operators, conditionals, `for` expressions and the functions
//! of `functions.rs`. Two reasons:
//! - runtime interpolations (`${attr.kernel.name}`, `${NOMAD_PORT_http}`)
//!   must stay the literal text the user wrote, as Nomad keeps them for the
//!   client to resolve on the node;
//! - evaluation must be bounded. Every value is charged to the file's
//!   [`Budget`] *before* it is built (a reference to a local is a copy and
//!   is charged again), so a file whose locals or `for` expressions
//!   multiply each other stops at `max_expansion_bytes` instead of
//!   allocating gigabytes; every value's nesting is checked against
//!   `max_nesting_depth` as it is built, so values never get deeper than
//!   the code that walks them can recurse. `hcl-rs`'s own evaluator
//!   checks neither, and its integer arithmetic panics on overflow.
//!
//! Recursion here follows the syntax tree, whose depth `scan.rs` bounded
//! before parsing, or a value, whose depth is bounded as it is built.
//! Locals are evaluated in dependency order (not by retrying until nothing
//! changes), so a chain of locals is no recursion at all.

use super::describe::{brief, kind_of_hcl};
use super::functions::{self, FnError};
use super::limits::{self, Budget, HclLimits, VALUE_OVERHEAD};
use super::scan;
use super::source::Source;
use super::JobspecError;
use hcl::edit::expr::{
    BinaryOperator, Expression, ForExpr, FuncCall, Object, ObjectKey, Traversal, TraversalOperator,
    UnaryOperator,
};
use hcl::edit::structure::{Attribute, Block, Body};
use hcl::edit::template::{
    Directive, Element, ForDirective, IfDirective, Interpolation, Strip, Template,
};
use hcl::edit::visit::{visit_expr, visit_traversal_operator, Visit};
use hcl::edit::Span;
use hcl::{Number, Value as Hcl};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::ops::Range;

type At = Option<Range<usize>>;

/// Why evaluating an expression stopped.
enum Fail {
    /// A variable no scope defines (`attr`, `node`, `NOMAD_PORT_http`):
    /// inside a string it is a runtime reference, kept as written; anywhere
    /// else it is an error.
    Unknown {
        name: String,
        at: At,
    },
    Error(JobspecError),
}

impl From<JobspecError> for Fail {
    fn from(e: JobspecError) -> Self {
        Fail::Error(e)
    }
}

/// A value and how deeply it nests (0 for a scalar, 1 for a list of
/// scalars), so that containers built from it can be checked without
/// walking it again.
struct Built {
    value: Hcl,
    depth: usize,
}

impl Built {
    fn scalar(value: Hcl) -> Self {
        Built { value, depth: 0 }
    }
}

/// A variable bound by an enclosing `for` expression or directive; the
/// chain runs from the innermost binding outwards.
struct Scope<'a> {
    parent: Option<&'a Scope<'a>>,
    name: &'a str,
    value: Hcl,
}

impl<'a> Scope<'a> {
    fn find(scope: Option<&'a Scope<'a>>, name: &str) -> Option<&'a Hcl> {
        let mut current = scope;
        while let Some(s) = current {
            if s.name == name {
                return Some(&s.value);
            }
            current = s.parent;
        }
        None
    }
}

pub(crate) struct Evaluator<'s> {
    src: &'s Source<'s>,
    budget: &'s Budget,
    max_depth: usize,
    /// `var`: the file's variables, an object.
    vars: Hcl,
    /// `local`: the file's locals evaluated so far, an object.
    locals: Hcl,
    /// Locals declared but not evaluated yet, to explain a reference to
    /// one (a cycle) better than "no such local".
    unresolved: HashSet<String>,
}

impl<'s> Evaluator<'s> {
    /// An evaluator that knows no variables yet (for evaluating defaults),
    /// charging `budget` and building values at most `max_depth` deep.
    pub fn new(src: &'s Source<'s>, budget: &'s Budget, max_depth: usize) -> Self {
        Evaluator {
            src,
            budget,
            max_depth,
            vars: Hcl::Object(hcl::Map::new()),
            locals: Hcl::Object(hcl::Map::new()),
            unresolved: HashSet::new(),
        }
    }

    /// How deeply values may nest (free-form blocks check theirs too).
    pub fn max_depth(&self) -> usize {
        self.max_depth
    }

    /// Declares `var.*` (from `variable` blocks, overridden by `given`,
    /// the `-var name=value` pairs of the command line) and `local.*`
    /// (from `locals` blocks) found at the top of the file.
    pub fn declare_top_level(
        &mut self,
        body: &Body,
        given: &BTreeMap<String, String>,
    ) -> Result<(), JobspecError> {
        self.vars = Hcl::Object(self.variables(body, given)?);
        self.locals(body)
    }

    fn variables(
        &self,
        body: &Body,
        given: &BTreeMap<String, String>,
    ) -> Result<hcl::Map<String, Hcl>, JobspecError> {
        let mut vars = hcl::Map::new();
        for block in body.get_blocks("variable") {
            let name = match block.labels.as_slice() {
                [label] => label.as_str().to_string(),
                _ => {
                    return Err(self.src.error(
                        block.ident.span(),
                        "a variable block needs exactly one label, its name",
                    ))
                }
            };
            check_variable_block(self.src, block, &name)?;
            let value = match (given.get(&name), block.body.get_attribute("default")) {
                (Some(text), default) => self.given_value(block, &name, text, default)?,
                (None, Some(default)) => self.value_of(&default.value)?,
                (None, None) => {
                    return Err(self.src.error(
                        block.ident.span(),
                        format!("variable {name:?} has no default and no value was given"),
                    ))
                }
            };
            if vars.insert(name.clone(), value).is_some() {
                return Err(self.src.error(
                    block.ident.span(),
                    format!("variable {name:?} is declared twice"),
                ));
            }
        }
        if let Some(name) = given.keys().find(|name| !vars.contains_key(*name)) {
            return Err(self.src.error(
                None,
                format!(
                    "a value was given for variable {name:?}, which this file does not declare"
                ),
            ));
        }
        Ok(vars)
    }

    /// A value given on the command line is text. As in Nomad, it is taken
    /// literally for string variables (declared `type = string`, or
    /// untyped with a string or no default) and read as an HCL expression
    /// (`8080`, `true`, `["a", "b"]`) for every other type, under the same
    /// limits as the file.
    fn given_value(
        &self,
        block: &Block,
        name: &str,
        text: &str,
        default: Option<&Attribute>,
    ) -> Result<Hcl, JobspecError> {
        let declared = block.body.get_attribute("type").map(|t| &t.value);
        let is_string = match declared {
            Some(Expression::Variable(t)) => t.as_str() == "string",
            Some(_) => false,
            None => default.is_none_or(|d| matches!(d.value, Expression::String(_))),
        };
        let at = block.ident.span();
        // Errors about the given text point at the variable block, since
        // the text is not part of the file.
        let relocate = |e: JobspecError| match e {
            JobspecError::Limit { limit, message, .. } => {
                let (line, column) = self.src.locate(at.as_ref().map_or(0, |s| s.start));
                JobspecError::Limit {
                    file: self.src.file.to_string(),
                    line,
                    column,
                    limit,
                    message: format!("in the value given for variable {name:?}: {message}"),
                }
            }
            other => other,
        };
        let bad = |detail: &str| {
            self.src.error(
                at.clone(),
                format!(
                    "invalid value {} given for variable {name:?}: {detail}",
                    brief(text)
                ),
            )
        };
        // The text becomes a string or a syntax tree about its size: charge
        // it first, so that a huge value is refused before it is parsed.
        self.charge(text.len() + VALUE_OVERHEAD, &at)
            .map_err(|f| relocate(self.error_of(f)))?;
        if is_string {
            return Ok(Hcl::String(text.to_string()));
        }
        let source = Source::new(text, self.src.file);
        if let Err(refused) = scan::scan(text, self.max_depth, self.budget) {
            let limits = HclLimits {
                max_nesting_depth: self.max_depth,
                max_expansion_bytes: self.budget.max(),
                ..HclLimits::default()
            };
            return Err(relocate(scan::scan_error(&source, refused, &limits)));
        }
        let expr = hcl::edit::parser::parse_expr(text).map_err(|e| bad(e.message()))?;
        // The given text has its own positions: evaluate it against its own
        // source, with the file's budget, and no variables (as in Nomad).
        let inner = Evaluator::new(&source, self.budget, self.max_depth);
        match inner.eval(&expr, None) {
            Ok(built) => Ok(built.value),
            Err(f) => match inner.error_of(f) {
                e @ JobspecError::Limit { .. } => Err(relocate(e)),
                JobspecError::Spec { message, .. } => Err(bad(&message)),
                other => Err(bad(&other.to_string())),
            },
        }
    }

    /// Locals may refer to each other in any order: they are evaluated in
    /// dependency order (each after the locals it names), then those left
    /// in a cycle in file order, where their references fail.
    fn locals(&mut self, body: &Body) -> Result<(), JobspecError> {
        let mut defs: Vec<(&str, &Expression, At)> = Vec::new();
        let mut index: HashMap<&str, usize> = HashMap::new();
        for block in body.get_blocks("locals") {
            if !block.labels.is_empty() {
                return Err(self
                    .src
                    .error(block.ident.span(), "a locals block takes no labels"));
            }
            if let Some(inner) = block.body.blocks().next() {
                return Err(self.src.error(
                    inner.ident.span(),
                    format!("unknown block {:?} in locals", inner.ident.as_str()),
                ));
            }
            for attr in block.body.attributes() {
                let name = attr.key.as_str();
                if index.insert(name, defs.len()).is_some() {
                    return Err(self
                        .src
                        .error(attr.span(), format!("local {name:?} is defined twice")));
                }
                defs.push((name, &attr.value, attr.span()));
            }
        }
        self.unresolved = defs.iter().map(|(name, ..)| name.to_string()).collect();
        for i in evaluation_order(&defs, &index) {
            let (name, expr, _) = defs[i];
            let value = self.value_of(expr)?;
            self.unresolved.remove(name);
            if let Hcl::Object(locals) = &mut self.locals {
                locals.insert(name.to_string(), value);
            }
        }
        Ok(())
    }

    /// The JSON value of an expression.
    pub fn value(&self, expr: &Expression) -> Result<Value, JobspecError> {
        self.value_of(expr).map(to_json)
    }

    fn value_of(&self, expr: &Expression) -> Result<Hcl, JobspecError> {
        self.eval(expr, None)
            .map(|built| built.value)
            .map_err(|f| self.error_of(f))
    }

    fn error_of(&self, fail: Fail) -> JobspecError {
        match fail {
            Fail::Error(e) => e,
            Fail::Unknown { name, at } => self.src.error(
                at,
                format!(
                    "unknown variable {name:?}: only var.*, local.* and the variables of \
                     `for` expressions have values when the job is parsed (a runtime \
                     reference like ${{attr.kernel.name}} belongs in a string)"
                ),
            ),
        }
    }

    fn error(&self, at: &At, message: impl Into<String>) -> Fail {
        Fail::Error(self.src.error(at.clone(), message))
    }

    /// Charges the budget, failing with the limit error at `at`.
    fn charge(&self, bytes: usize, at: &At) -> Result<(), Fail> {
        self.budget.charge(bytes).map_err(|_| self.exhausted(at))
    }

    fn exhausted(&self, at: &At) -> Fail {
        Fail::Error(limits::expansion_error(
            self.src,
            at.clone(),
            self.budget.max(),
        ))
    }

    /// A container of `depth`, refused if it nests deeper than allowed.
    fn container(&self, value: Hcl, depth: usize, at: &At) -> Result<Built, Fail> {
        if depth > self.max_depth {
            let offset = at.as_ref().map_or(0, |s| s.start);
            return Err(Fail::Error(limits::depth_error(
                self.src,
                offset,
                self.max_depth,
                "a value nested",
            )));
        }
        Ok(Built { value, depth })
    }

    /// A copy of a value that already exists (a variable, a part of one),
    /// charged for its whole size.
    fn copy(&self, value: &Hcl, at: &At) -> Result<Built, Fail> {
        let (bytes, depth) = measure(value);
        self.charge(bytes, at)?;
        self.container(value.clone(), depth, at)
    }

    fn eval(&self, expr: &Expression, scope: Option<&Scope>) -> Result<Built, Fail> {
        let at = expr.span();
        match expr {
            Expression::Null(_) => self.scalar(Hcl::Null, &at),
            Expression::Bool(b) => self.scalar(Hcl::Bool(*b.value()), &at),
            Expression::Number(n) => self.scalar(Hcl::Number(*n.value()), &at),
            Expression::String(s) => {
                self.charge(s.len() + VALUE_OVERHEAD, &at)?;
                Ok(Built::scalar(Hcl::String(s.value().clone())))
            }
            Expression::Array(items) => {
                self.charge(VALUE_OVERHEAD, &at)?;
                let mut out = Vec::with_capacity(items.len());
                let mut depth = 0;
                for item in items.iter() {
                    let built = self.eval(item, scope)?;
                    depth = depth.max(built.depth);
                    out.push(built.value);
                }
                self.container(Hcl::Array(out), depth + 1, &at)
            }
            Expression::Object(object) => self.object(object, scope, &at),
            Expression::StringTemplate(t) => self.template(t, scope, &at),
            Expression::HeredocTemplate(h) => self.template(&h.template, scope, &at),
            Expression::Parenthesis(p) => self.eval(p.inner(), scope),
            Expression::Variable(name) => {
                let value = self.lookup(name.as_str(), scope, &at)?;
                self.copy(value, &at)
            }
            Expression::Traversal(t) => self.traversal(t, scope, &at),
            Expression::FuncCall(call) => self.call(call, scope, &at),
            Expression::Conditional(c) => {
                if self.boolean(&c.cond_expr, scope, "the condition of `? :`")? {
                    self.eval(&c.true_expr, scope)
                } else {
                    self.eval(&c.false_expr, scope)
                }
            }
            Expression::UnaryOp(op) => {
                let operand = self.eval(&op.expr, scope)?;
                self.charge(VALUE_OVERHEAD, &at)?;
                match (*op.operator.value(), operand.value) {
                    (UnaryOperator::Not, Hcl::Bool(b)) => Ok(Built::scalar(Hcl::Bool(!b))),
                    // hcl's negation turns what i64 cannot hold into a float.
                    (UnaryOperator::Neg, Hcl::Number(n)) => Ok(Built::scalar(Hcl::Number(-n))),
                    (UnaryOperator::Not, other) => Err(self.error(
                        &at,
                        format!("`!` needs a bool, got {}", kind_of_hcl(&other)),
                    )),
                    (UnaryOperator::Neg, other) => Err(self.error(
                        &at,
                        format!("`-` needs a number, got {}", kind_of_hcl(&other)),
                    )),
                }
            }
            Expression::BinaryOp(_) => self.binary(expr, scope),
            Expression::ForExpr(f) => self.for_expr(f, scope, &at),
        }
    }

    fn scalar(&self, value: Hcl, at: &At) -> Result<Built, Fail> {
        self.charge(VALUE_OVERHEAD, at)?;
        Ok(Built::scalar(value))
    }

    /// A bool, or an error naming `what` needed it.
    fn boolean(&self, expr: &Expression, scope: Option<&Scope>, what: &str) -> Result<bool, Fail> {
        match self.eval(expr, scope)?.value {
            Hcl::Bool(b) => Ok(b),
            other => Err(self.error(
                &expr.span(),
                format!("{what} must be a bool, got {}", kind_of_hcl(&other)),
            )),
        }
    }

    /// A variable by name: a `for` variable, `var` or `local`.
    fn lookup<'v>(
        &'v self,
        name: &str,
        scope: Option<&'v Scope<'v>>,
        at: &At,
    ) -> Result<&'v Hcl, Fail> {
        if let Some(value) = Scope::find(scope, name) {
            return Ok(value);
        }
        match name {
            "var" => Ok(&self.vars),
            "local" => Ok(&self.locals),
            _ => Err(Fail::Unknown {
                name: name.to_string(),
                at: at.clone(),
            }),
        }
    }

    fn object(&self, object: &Object, scope: Option<&Scope>, at: &At) -> Result<Built, Fail> {
        self.charge(VALUE_OVERHEAD, at)?;
        let mut out = hcl::Map::new();
        let mut depth = 0;
        for (key, value) in object.iter() {
            let name = match key {
                ObjectKey::Ident(ident) => ident.as_str().to_string(),
                ObjectKey::Expression(e) => self.key(e, scope)?,
            };
            self.charge(name.len() + VALUE_OVERHEAD, at)?;
            let built = self.eval(value.expr(), scope)?;
            depth = depth.max(built.depth);
            out.insert(name, built.value);
        }
        self.container(Hcl::Object(out), depth + 1, at)
    }

    /// An object key: a string, or a number or bool taken as its text.
    fn key(&self, expr: &Expression, scope: Option<&Scope>) -> Result<String, Fail> {
        match self.eval(expr, scope)?.value {
            Hcl::String(s) => Ok(s),
            Hcl::Number(n) => Ok(n.to_string()),
            Hcl::Bool(b) => Ok(b.to_string()),
            other => Err(self.error(
                &expr.span(),
                format!("object keys must be strings, got {}", kind_of_hcl(&other)),
            )),
        }
    }

    /// A string template: literal text, interpolations and directives.
    fn template(&self, template: &Template, scope: Option<&Scope>, at: &At) -> Result<Built, Fail> {
        self.charge(VALUE_OVERHEAD, at)?;
        let mut out = String::new();
        self.render(template, scope, &mut out, false, false, at)?;
        Ok(Built::scalar(Hcl::String(out)))
    }

    /// Appends a template's text to `out`. `~` strip markers remove the
    /// whitespace next to them, as in Nomad: `trim_start` and `trim_end`
    /// say whether the markers around this template ask for it at its ends.
    fn render(
        &self,
        template: &Template,
        scope: Option<&Scope>,
        out: &mut String,
        trim_start: bool,
        trim_end: bool,
        at: &At,
    ) -> Result<(), Fail> {
        let elements: Vec<&Element> = template.iter().collect();
        for (i, element) in elements.iter().enumerate() {
            match element {
                Element::Literal(text) => {
                    // A literal's neighbours' markers strip its ends; the
                    // template's own ends take the markers around it.
                    let strip_start = match i.checked_sub(1) {
                        Some(prev) => strip_of(elements[prev]).strip_end(),
                        None => trim_start,
                    };
                    let strip_end = match elements.get(i + 1) {
                        Some(next) => strip_of(next).strip_start(),
                        None => trim_end,
                    };
                    let text = stripped(text.value().as_str(), strip_start, strip_end);
                    self.push(out, text, at)?;
                }
                Element::Interpolation(interp) => {
                    self.render_interpolation(interp, scope, out, at)?;
                }
                Element::Directive(Directive::If(d)) => self.render_if(d, scope, out, at)?,
                Element::Directive(Directive::For(d)) => self.render_for(d, scope, out, at)?,
            }
        }
        Ok(())
    }

    /// `${ expr }`: the value's text, or the interpolation as written when
    /// it is a runtime reference.
    fn render_interpolation(
        &self,
        interp: &Interpolation,
        scope: Option<&Scope>,
        out: &mut String,
        at: &At,
    ) -> Result<(), Fail> {
        match self.eval(&interp.expr, scope) {
            Ok(built) => {
                let text = self.interpolated(built.value, &interp.expr.span())?;
                self.push(out, &text, at)
            }
            // A runtime reference: keep the interpolation as written.
            Err(Fail::Unknown { .. }) => {
                let span = interp.span();
                let raw = span.as_ref().and_then(|s| self.src.slice(s));
                let raw =
                    raw.ok_or_else(|| self.error(&span, "interpolation without source text"))?;
                self.push(out, raw, at)
            }
            Err(e) => Err(e),
        }
    }

    /// `%{ if }`: the branch the condition picks, stripped by the markers
    /// around that branch.
    fn render_if(
        &self,
        d: &IfDirective,
        scope: Option<&Scope>,
        out: &mut String,
        at: &At,
    ) -> Result<(), Fail> {
        let cond = &d.if_expr.cond_expr;
        if self.boolean(cond, scope, "the condition of `%{ if }`")? {
            let next = d.else_expr.as_ref().map_or(d.endif_expr.strip, |e| e.strip);
            self.render(
                &d.if_expr.template,
                scope,
                out,
                d.if_expr.strip.strip_end(),
                next.strip_start(),
                at,
            )
        } else if let Some(e) = &d.else_expr {
            self.render(
                &e.template,
                scope,
                out,
                e.strip.strip_end(),
                d.endif_expr.strip.strip_start(),
                at,
            )
        } else {
            Ok(())
        }
    }

    /// `%{ for }`: the body once per item, with the key and value bound.
    fn render_for(
        &self,
        d: &ForDirective,
        scope: Option<&Scope>,
        out: &mut String,
        at: &At,
    ) -> Result<(), Fail> {
        let f = &d.for_expr;
        let items = self.items(&f.collection_expr, scope)?;
        for (key, value) in items {
            // Each iteration is a step, even one that renders nothing.
            self.charge(VALUE_OVERHEAD, at)?;
            let key_scope = f.key_var.as_ref().map(|k| Scope {
                parent: scope,
                name: k.as_str(),
                value: key,
            });
            let inner = Scope {
                parent: key_scope.as_ref().or(scope),
                name: f.value_var.as_str(),
                value,
            };
            self.render(
                &f.template,
                Some(&inner),
                out,
                f.strip.strip_end(),
                d.endfor_expr.strip.strip_start(),
                at,
            )?;
        }
        Ok(())
    }

    fn push(&self, out: &mut String, text: &str, at: &At) -> Result<(), Fail> {
        self.charge(text.len(), at)?;
        out.push_str(text);
        Ok(())
    }

    /// The text an interpolated value contributes.
    fn interpolated(&self, value: Hcl, at: &At) -> Result<String, Fail> {
        match value {
            Hcl::String(s) => Ok(s),
            Hcl::Number(n) => Ok(n.to_string()),
            Hcl::Bool(b) => Ok(b.to_string()),
            other => Err(self.error(
                at,
                format!("cannot interpolate {} into a string", kind_of_hcl(&other)),
            )),
        }
    }

    /// The (key, value) pairs a `for` iterates: a list's indexes and
    /// elements, or an object's keys (in lexical order, as in HCL) and
    /// values.
    fn items(&self, expr: &Expression, scope: Option<&Scope>) -> Result<Vec<(Hcl, Hcl)>, Fail> {
        match self.eval(expr, scope)?.value {
            Hcl::Array(items) => Ok(items
                .into_iter()
                .enumerate()
                .map(|(i, v)| (Hcl::from(i as u64), v))
                .collect()),
            Hcl::Object(map) => {
                let mut entries: Vec<(String, Hcl)> = map.into_iter().collect();
                entries.sort_by(|a, b| a.0.cmp(&b.0));
                Ok(entries
                    .into_iter()
                    .map(|(k, v)| (Hcl::String(k), v))
                    .collect())
            }
            other => Err(self.error(
                &expr.span(),
                format!(
                    "a `for` needs a list or an object to iterate, got {}",
                    kind_of_hcl(&other)
                ),
            )),
        }
    }

    fn for_expr(&self, f: &ForExpr, scope: Option<&Scope>, at: &At) -> Result<Built, Fail> {
        let items = self.items(&f.intro.collection_expr, scope)?;
        self.charge(VALUE_OVERHEAD, at)?;
        let mut list = Vec::new();
        let mut object = hcl::Map::new();
        let mut depth = 0;
        for (key, value) in items {
            // Each iteration is a step, even one the condition skips.
            self.charge(VALUE_OVERHEAD, at)?;
            let key_scope = f.intro.key_var.as_ref().map(|k| Scope {
                parent: scope,
                name: k.as_str(),
                value: key,
            });
            let inner = Scope {
                parent: key_scope.as_ref().or(scope),
                name: f.intro.value_var.as_str(),
                value,
            };
            let inner = Some(&inner);
            if let Some(cond) = &f.cond {
                if !self.boolean(&cond.expr, inner, "the condition of a `for`")? {
                    continue;
                }
            }
            let Some(key_expr) = &f.key_expr else {
                let built = self.eval(&f.value_expr, inner)?;
                depth = depth.max(built.depth);
                list.push(built.value);
                continue;
            };
            let key = self.key(key_expr, inner)?;
            self.charge(key.len() + VALUE_OVERHEAD, at)?;
            let built = self.eval(&f.value_expr, inner)?;
            if f.grouping {
                // `k => v...` groups the values of equal keys in lists.
                depth = depth.max(built.depth + 1);
                let group = object.entry(key).or_insert_with(|| Hcl::Array(Vec::new()));
                if let Hcl::Array(values) = group {
                    values.push(built.value);
                }
            } else {
                depth = depth.max(built.depth);
                if object.contains_key(&key) {
                    return Err(self.error(
                        &key_expr.span(),
                        format!(
                            "duplicate key {} in a `for` expression (write `...` after the \
                             value to group values by key)",
                            brief(&key)
                        ),
                    ));
                }
                object.insert(key, built.value);
            }
        }
        let value = match f.key_expr {
            Some(_) => Hcl::Object(object),
            None => Hcl::Array(list),
        };
        self.container(value, depth + 1, at)
    }

    /// `base.attr[index]...`: read in place, then only the selected part
    /// is copied (and charged).
    fn traversal(&self, t: &Traversal, scope: Option<&Scope>, at: &At) -> Result<Built, Fail> {
        // Each splat nests this function once more.
        let splats = t
            .operators
            .iter()
            .filter(|op| {
                matches!(
                    op.value(),
                    TraversalOperator::AttrSplat(_) | TraversalOperator::FullSplat(_)
                )
            })
            .count();
        if splats > self.max_depth {
            let offset = at.as_ref().map_or(0, |s| s.start);
            return Err(Fail::Error(limits::depth_error(
                self.src,
                offset,
                self.max_depth,
                "splats",
            )));
        }
        let operators: Vec<&TraversalOperator> = t.operators.iter().map(|o| o.value()).collect();
        match &t.expr {
            Expression::Variable(name) => {
                if let (Some(TraversalOperator::GetAttr(local)), true) =
                    (operators.first(), name.as_str() == "local")
                {
                    if self.unresolved.contains(local.as_str())
                        && Scope::find(scope, "local").is_none()
                    {
                        return Err(self.error(
                            at,
                            format!(
                                "local.{} cannot be evaluated first: the locals refer to each \
                                 other in a cycle",
                                local.as_str()
                            ),
                        ));
                    }
                }
                let base = self.lookup(name.as_str(), scope, &name.span())?;
                self.walk(base, &operators, scope, at)
            }
            other => {
                let base = self.eval(other, scope)?;
                self.walk_built(base, &operators, scope, at)
            }
        }
    }

    fn walk_built(
        &self,
        base: Built,
        operators: &[&TraversalOperator],
        scope: Option<&Scope>,
        at: &At,
    ) -> Result<Built, Fail> {
        if operators.is_empty() {
            return Ok(base);
        }
        self.walk(&base.value, operators, scope, at)
    }

    fn walk(
        &self,
        mut value: &Hcl,
        operators: &[&TraversalOperator],
        scope: Option<&Scope>,
        at: &At,
    ) -> Result<Built, Fail> {
        let mut i = 0;
        while let Some(op) = operators.get(i) {
            value = match op {
                TraversalOperator::GetAttr(name) => self.attribute(value, name.as_str(), at)?,
                TraversalOperator::LegacyIndex(n) => self.element(value, *n.value(), at)?,
                TraversalOperator::Index(expr) => match self.eval(expr, scope)?.value {
                    Hcl::String(key) => self.attribute(value, &key, at)?,
                    Hcl::Number(n) => match n.as_u64() {
                        Some(n) => self.element(value, n, at)?,
                        None => {
                            return Err(self.error(
                                &expr.span(),
                                format!("an index must be a whole number from 0, got {n}"),
                            ))
                        }
                    },
                    other => {
                        return Err(self.error(
                            &expr.span(),
                            format!(
                                "an index must be a number or a string, got {}",
                                kind_of_hcl(&other)
                            ),
                        ))
                    }
                },
                // `.*` applies the attribute names after it to each element.
                TraversalOperator::AttrSplat(_) => {
                    let rest = &operators[i + 1..];
                    let names = rest
                        .iter()
                        .take_while(|o| matches!(o, TraversalOperator::GetAttr(_)))
                        .count();
                    let splatted = self.splat(value, &rest[..names], scope, at)?;
                    return self.walk_built(splatted, &rest[names..], scope, at);
                }
                // `[*]` applies everything after it to each element.
                TraversalOperator::FullSplat(_) => {
                    return self.splat(value, &operators[i + 1..], scope, at)
                }
            };
            i += 1;
        }
        self.copy(value, at)
    }

    /// A splat: a list of what `operators` select from each element; null
    /// is the empty list and any other value a list of one.
    fn splat(
        &self,
        value: &Hcl,
        operators: &[&TraversalOperator],
        scope: Option<&Scope>,
        at: &At,
    ) -> Result<Built, Fail> {
        self.charge(VALUE_OVERHEAD, at)?;
        let elements: Vec<&Hcl> = match value {
            Hcl::Array(items) => items.iter().collect(),
            Hcl::Null => Vec::new(),
            other => vec![other],
        };
        let mut out = Vec::with_capacity(elements.len());
        let mut depth = 0;
        for element in elements {
            let built = self.walk(element, operators, scope, at)?;
            depth = depth.max(built.depth);
            out.push(built.value);
        }
        self.container(Hcl::Array(out), depth + 1, at)
    }

    fn attribute<'v>(&self, value: &'v Hcl, name: &str, at: &At) -> Result<&'v Hcl, Fail> {
        match value {
            Hcl::Object(map) => map.get(name).ok_or_else(|| {
                let whole = at.as_ref().and_then(|s| self.src.slice(s)).unwrap_or("");
                self.error(
                    at,
                    format!("no attribute {} in {}", brief(name), brief_code(whole)),
                )
            }),
            other => Err(self.error(
                at,
                format!(
                    "cannot read attribute {} of {}",
                    brief(name),
                    kind_of_hcl(other)
                ),
            )),
        }
    }

    fn element<'v>(&self, value: &'v Hcl, index: u64, at: &At) -> Result<&'v Hcl, Fail> {
        match value {
            Hcl::Array(items) => usize::try_from(index)
                .ok()
                .and_then(|i| items.get(i))
                .ok_or_else(|| {
                    self.error(
                        at,
                        format!(
                            "index {index} is out of range for a list of {}",
                            items.len()
                        ),
                    )
                }),
            other => Err(self.error(
                at,
                format!("cannot index {} with a number", kind_of_hcl(other)),
            )),
        }
    }

    fn call(&self, call: &FuncCall, scope: Option<&Scope>, at: &At) -> Result<Built, Fail> {
        let name = call.name.name.as_str();
        let function = if call.name.is_namespaced() {
            None
        } else {
            functions::lookup(name)
        };
        let Some(function) = function else {
            return Err(self.error(
                at,
                format!(
                    "unknown function {name:?}; job files can call {}",
                    functions::names()
                ),
            ));
        };
        let count = call.args.len();
        let mut args = Vec::with_capacity(count);
        for (i, arg) in call.args.iter().enumerate() {
            let built = self.eval(arg, scope)?;
            if call.args.expand_final() && i + 1 == count {
                // `f(a, list...)` passes the list's elements as arguments.
                match built.value {
                    Hcl::Array(items) => args.extend(items),
                    other => {
                        return Err(self.error(
                            &arg.span(),
                            format!(
                                "the argument expanded with `...` must be a list, got {}",
                                kind_of_hcl(&other)
                            ),
                        ))
                    }
                }
            } else {
                args.push(built.value);
            }
        }
        match function.call(args, self.budget) {
            Ok(value) => {
                // Functions only select, reorder or flatten what they are
                // given, so this never passes the limit; it gives the depth.
                let (_, depth) = measure(&value);
                self.container(value, depth, at)
            }
            Err(FnError::Exhausted) => Err(self.exhausted(at)),
            Err(FnError::Message(message)) => Err(self.error(at, message)),
        }
    }

    /// A chain of binary operators, evaluated left to right with HCL's
    /// precedence (`*` `/` `%`, then `+` `-`, comparisons, equality, `&&`,
    /// `||`). The parser nests chains to the right without precedence.
    fn binary(&self, expr: &Expression, scope: Option<&Scope>) -> Result<Built, Fail> {
        let mut operands = Vec::new();
        let mut operators = Vec::new();
        flatten(expr, &mut operands, &mut operators);
        let mut values: Vec<Hcl> = Vec::with_capacity(operands.len());
        let mut pending: Vec<(BinaryOperator, At)> = Vec::new();
        for (i, operand) in operands.iter().enumerate() {
            values.push(self.eval(operand, scope)?.value);
            if let Some((op, at)) = operators.get(i) {
                while pending
                    .last()
                    .is_some_and(|(top, _)| top.precedence() >= op.precedence())
                {
                    self.reduce(&mut values, &mut pending)?;
                }
                pending.push((*op, at.clone()));
            }
        }
        while !pending.is_empty() {
            self.reduce(&mut values, &mut pending)?;
        }
        let value = values.pop().unwrap_or(Hcl::Null);
        Ok(Built::scalar(value))
    }

    fn reduce(
        &self,
        values: &mut Vec<Hcl>,
        pending: &mut Vec<(BinaryOperator, At)>,
    ) -> Result<(), Fail> {
        let (Some((op, at)), Some(rhs), Some(lhs)) = (pending.pop(), values.pop(), values.pop())
        else {
            return Err(self.error(&None, "malformed operator chain"));
        };
        self.charge(VALUE_OVERHEAD, &at)?;
        values.push(self.operate(op, lhs, rhs, &at)?);
        Ok(())
    }

    fn operate(&self, op: BinaryOperator, lhs: Hcl, rhs: Hcl, at: &At) -> Result<Hcl, Fail> {
        use BinaryOperator::*;
        let value = match (op, &lhs, &rhs) {
            (Eq, ..) => Hcl::Bool(lhs == rhs),
            (NotEq, ..) => Hcl::Bool(lhs != rhs),
            (And, Hcl::Bool(a), Hcl::Bool(b)) => Hcl::Bool(*a && *b),
            (Or, Hcl::Bool(a), Hcl::Bool(b)) => Hcl::Bool(*a || *b),
            (Less | LessEq | Greater | GreaterEq, Hcl::Number(a), Hcl::Number(b)) => {
                let ordering = a.partial_cmp(b);
                Hcl::Bool(match op {
                    Less => ordering.is_some_and(|o| o.is_lt()),
                    LessEq => ordering.is_some_and(|o| o.is_le()),
                    Greater => ordering.is_some_and(|o| o.is_gt()),
                    _ => ordering.is_some_and(|o| o.is_ge()),
                })
            }
            (Plus | Minus | Mul | Div | Mod, Hcl::Number(a), Hcl::Number(b)) => {
                Hcl::Number(arithmetic(op, a, b).map_err(|m| self.error(at, m))?)
            }
            _ => {
                return Err(self.error(
                    at,
                    format!(
                        "operator `{op}` cannot combine {} and {}",
                        kind_of_hcl(&lhs),
                        kind_of_hcl(&rhs)
                    ),
                ))
            }
        };
        Ok(value)
    }
}

/// The operands and operators of a chain of binary operations, in source
/// order (parenthesized chains are single operands).
fn flatten<'e>(
    expr: &'e Expression,
    operands: &mut Vec<&'e Expression>,
    operators: &mut Vec<(BinaryOperator, At)>,
) {
    match expr {
        Expression::BinaryOp(op) => {
            flatten(&op.lhs_expr, operands, operators);
            operators.push((*op.operator.value(), op.operator.span()));
            flatten(&op.rhs_expr, operands, operators);
        }
        other => operands.push(other),
    }
}

/// `a op b` on numbers. Whole numbers are added, subtracted, multiplied
/// and divided with remainder exactly while the result fits 64 bits (and
/// as floats past that); `/` always divides as floats, as in HCL. Division
/// by zero and results that are no finite number are errors, not panics.
fn arithmetic(op: BinaryOperator, a: &Number, b: &Number) -> Result<Number, String> {
    use BinaryOperator::*;
    let whole = |n: &Number| {
        n.as_i64()
            .map(i128::from)
            .or_else(|| n.as_u64().map(i128::from))
    };
    if let (Some(x), Some(y)) = (whole(a), whole(b)) {
        let exact = match op {
            Plus => x.checked_add(y),
            Minus => x.checked_sub(y),
            Mul => x.checked_mul(y),
            Mod if y == 0 => return Err("division by zero (`% 0`)".into()),
            Mod => x.checked_rem(y),
            _ => None,
        };
        if let Some(r) = exact {
            if let Ok(r) = i64::try_from(r) {
                return Ok(Number::from(r));
            }
            if let Ok(r) = u64::try_from(r) {
                return Ok(Number::from(r));
            }
        }
    }
    let (x, y) = (
        a.as_f64().unwrap_or(f64::NAN),
        b.as_f64().unwrap_or(f64::NAN),
    );
    if matches!(op, Div | Mod) && y == 0.0 {
        return Err(format!("division by zero (`{op} 0`)"));
    }
    let r = match op {
        Plus => x + y,
        Minus => x - y,
        Mul => x * y,
        Div => x / y,
        _ => x % y,
    };
    Number::from_f64(r).ok_or_else(|| format!("the result of `{op}` is not a finite number"))
}

/// A literal's text with the whitespace at its ends removed where a `~`
/// marker next to it asks for that.
fn stripped(text: &str, strip_start: bool, strip_end: bool) -> &str {
    let text = if strip_start { text.trim_start() } else { text };
    if strip_end {
        text.trim_end()
    } else {
        text
    }
}

/// The strip markers an element puts on its neighbours: an interpolation's
/// own, a directive's opening marker before it and closing marker after.
fn strip_of(element: &Element) -> Strip {
    match element {
        Element::Literal(_) => Strip::None,
        Element::Interpolation(interp) => interp.strip,
        Element::Directive(Directive::If(d)) => Strip::from((
            d.if_expr.strip.strip_start(),
            d.endif_expr.strip.strip_end(),
        )),
        Element::Directive(Directive::For(d)) => Strip::from((
            d.for_expr.strip.strip_start(),
            d.endfor_expr.strip.strip_end(),
        )),
    }
}

/// The order to evaluate locals in: each after the locals it names, in
/// file order otherwise (Kahn's algorithm, no recursion); then those in or
/// behind a cycle, and last those that read the whole `local` object.
fn evaluation_order(defs: &[(&str, &Expression, At)], index: &HashMap<&str, usize>) -> Vec<usize> {
    let n = defs.len();
    let mut waiting_on = vec![0usize; n];
    let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut reads_all = vec![false; n];
    for (i, (_, expr, _)) in defs.iter().enumerate() {
        let mut refs = LocalRefs::default();
        refs.visit_expr(expr);
        reads_all[i] = refs.all;
        for name in &refs.names {
            if let Some(&j) = index.get(name.as_str()) {
                dependents[j].push(i);
                waiting_on[i] += 1;
            }
        }
    }
    let mut order = Vec::with_capacity(n);
    let mut done = vec![false; n];
    let mut ready: VecDeque<usize> = (0..n)
        .filter(|&i| waiting_on[i] == 0 && !reads_all[i])
        .collect();
    while let Some(i) = ready.pop_front() {
        order.push(i);
        done[i] = true;
        for &d in &dependents[i] {
            waiting_on[d] -= 1;
            if waiting_on[d] == 0 && !reads_all[d] {
                ready.push_back(d);
            }
        }
    }
    order.extend((0..n).filter(|&i| !done[i] && !reads_all[i]));
    order.extend((0..n).filter(|&i| reads_all[i]));
    order
}

/// The locals an expression names (`local.x`, `local["x"]`), and whether
/// it reads the `local` object some other way.
#[derive(Default)]
struct LocalRefs {
    names: BTreeSet<String>,
    all: bool,
}

impl Visit for LocalRefs {
    fn visit_expr(&mut self, expr: &Expression) {
        match expr {
            Expression::Variable(v) if v.as_str() == "local" => self.all = true,
            Expression::Traversal(t) if matches!(&t.expr, Expression::Variable(v) if v.as_str() == "local") =>
            {
                match t.operators.first().map(|o| o.value()) {
                    Some(TraversalOperator::GetAttr(name)) => {
                        self.names.insert(name.as_str().to_string());
                    }
                    Some(TraversalOperator::Index(Expression::String(name))) => {
                        self.names.insert(name.value().clone());
                    }
                    _ => self.all = true,
                }
                for op in &t.operators {
                    visit_traversal_operator(self, op);
                }
            }
            _ => visit_expr(self, expr),
        }
    }
}

/// Bytes a value costs (its text plus [`VALUE_OVERHEAD`] per value and
/// per object key) and how deeply it nests.
fn measure(value: &Hcl) -> (usize, usize) {
    match value {
        Hcl::String(s) => (VALUE_OVERHEAD + s.len(), 0),
        Hcl::Array(items) => items
            .iter()
            .fold((VALUE_OVERHEAD, 1), |(bytes, depth), item| {
                let (b, d) = measure(item);
                (bytes.saturating_add(b), depth.max(d + 1))
            }),
        Hcl::Object(map) => map
            .iter()
            .fold((VALUE_OVERHEAD, 1), |(bytes, depth), (k, v)| {
                let (b, d) = measure(v);
                let entry = b.saturating_add(k.len() + VALUE_OVERHEAD);
                (bytes.saturating_add(entry), depth.max(d + 1))
            }),
        Hcl::Null | Hcl::Bool(_) | Hcl::Number(_) => (VALUE_OVERHEAD, 0),
    }
}

/// The JSON form of a value (its depth is bounded, so this recursion is).
fn to_json(value: Hcl) -> Value {
    match value {
        Hcl::Null => Value::Null,
        Hcl::Bool(b) => Value::Bool(b),
        Hcl::Number(n) => {
            if let Some(u) = n.as_u64() {
                Value::from(u)
            } else if let Some(i) = n.as_i64() {
                Value::from(i)
            } else {
                n.as_f64()
                    .and_then(serde_json::Number::from_f64)
                    .map_or(Value::Null, Value::Number)
            }
        }
        Hcl::String(s) => Value::String(s),
        Hcl::Array(items) => Value::Array(items.into_iter().map(to_json).collect()),
        Hcl::Object(map) => Value::Object(map.into_iter().map(|(k, v)| (k, to_json(v))).collect()),
    }
}

fn check_variable_block(src: &Source, block: &Block, name: &str) -> Result<(), JobspecError> {
    // `type`, `description` and `sensitive` document the variable; herder
    // checks values against the job schema instead, so they are accepted.
    const KNOWN: [&str; 4] = ["default", "type", "description", "sensitive"];
    for attr in block.body.attributes() {
        if !KNOWN.contains(&attr.key.as_str()) {
            return Err(src.error(
                attr.key.span(),
                format!(
                    "unknown attribute {:?} in variable {name:?}",
                    attr.key.as_str()
                ),
            ));
        }
    }
    if let Some(inner) = block.body.blocks().next() {
        return Err(src.error(
            inner.ident.span(),
            format!(
                "unknown block {:?} in variable {name:?} (validation blocks are not supported)",
                inner.ident.as_str()
            ),
        ));
    }
    Ok(())
}

/// Source text for a message, unquoted and cut short.
fn brief_code(s: &str) -> String {
    const MAX_CHARS: usize = 60;
    match s.char_indices().nth(MAX_CHARS) {
        Some((cut, _)) => format!("{}...", &s[..cut]),
        None => s.to_string(),
    }
}
