//! Evaluating HCL expressions into JSON values.
//!
//! Literals, lists, objects and string templates are walked here so that
//! runtime interpolations (`${attr.kernel.name}`, `${NOMAD_PORT_http}`)
//! can be kept as the literal text the user wrote; Nomad's HCL2 parser
//! does the same, because the client resolves them on the node. Anything
//! else (variables, arithmetic, conditionals, `for`, function calls) goes
//! to `hcl-rs`'s evaluator with `var`, `local` and the functions of
//! `functions.rs` declared.

use super::source::Source;
use super::JobspecError;
use hcl::edit::expr::{Expression, Object, ObjectKey};
use hcl::edit::structure::{Block, Body};
use hcl::edit::template::Element;
use hcl::edit::Span;
use hcl::eval::{Context, ErrorKind, Evaluate};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// Roots an interpolation may reference at parse time; every other root is
/// a runtime reference left for the client.
const PARSE_TIME_ROOTS: [&str; 2] = ["var", "local"];

pub(crate) struct Evaluator<'s> {
    src: &'s Source<'s>,
    ctx: Context<'static>,
}

impl<'s> Evaluator<'s> {
    /// An evaluator that knows no variables yet (for evaluating defaults).
    pub fn new(src: &'s Source<'s>) -> Self {
        let mut ctx = Context::new();
        super::functions::declare_all(&mut ctx);
        ctx.declare_var("var", hcl::Value::Object(hcl::Map::new()));
        ctx.declare_var("local", hcl::Value::Object(hcl::Map::new()));
        Evaluator { src, ctx }
    }

    /// Declares `var.*` (from `variable` blocks, overridden by `given`,
    /// the `-var name=value` pairs of the command line) and `local.*`
    /// (from `locals` blocks) found at the top of the file.
    pub fn declare_top_level(
        &mut self,
        body: &Body,
        given: &BTreeMap<String, String>,
    ) -> Result<(), JobspecError> {
        let vars = self.variables(body, given)?;
        self.ctx
            .declare_var("var", json_to_hcl(Value::Object(vars)));
        let locals = self.locals(body)?;
        self.ctx
            .declare_var("local", json_to_hcl(Value::Object(locals)));
        Ok(())
    }

    fn variables(
        &self,
        body: &Body,
        given: &BTreeMap<String, String>,
    ) -> Result<Map<String, Value>, JobspecError> {
        let mut vars = Map::new();
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
                (None, Some(default)) => self.value(&default.value)?,
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
    /// (`8080`, `true`, `["a", "b"]`) for every other type.
    fn given_value(
        &self,
        block: &Block,
        name: &str,
        text: &str,
        default: Option<&hcl::edit::structure::Attribute>,
    ) -> Result<Value, JobspecError> {
        let declared = block.body.get_attribute("type").map(|t| &t.value);
        let is_string = match declared {
            Some(Expression::Variable(t)) => t.as_str() == "string",
            Some(_) => false,
            None => default.is_none_or(|d| matches!(d.value, Expression::String(_))),
        };
        if is_string {
            return Ok(Value::String(text.to_string()));
        }
        let bad = |detail: String| {
            self.src.error(
                block.ident.span(),
                format!("invalid value {text:?} given for variable {name:?}: {detail}"),
            )
        };
        let expr = hcl::edit::parser::parse_expr(text).map_err(|e| bad(e.message().to_string()))?;
        let value: hcl::Expression = expr.into();
        let value = value
            .evaluate(&Context::new())
            .map_err(|e| bad(e.to_string()))?;
        serde_json::to_value(value).map_err(|e| bad(e.to_string()))
    }

    /// Locals may refer to each other in any order: evaluate in passes
    /// until every local resolved or a pass made no progress.
    fn locals(&mut self, body: &Body) -> Result<Map<String, Value>, JobspecError> {
        let mut pending: Vec<(String, &Expression, Option<std::ops::Range<usize>>)> = Vec::new();
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
                pending.push((attr.key.as_str().to_string(), &attr.value, attr.span()));
            }
        }
        let mut locals = Map::new();
        while !pending.is_empty() {
            let mut first_error = None;
            let before = pending.len();
            let mut still = Vec::new();
            for (name, expr, span) in pending {
                match self.value(expr) {
                    Ok(v) => {
                        if locals.insert(name.clone(), v).is_some() {
                            return Err(self
                                .src
                                .error(span, format!("local {name:?} is defined twice")));
                        }
                        self.ctx
                            .declare_var("local", json_to_hcl(Value::Object(locals.clone())));
                    }
                    Err(e) => {
                        first_error.get_or_insert(e);
                        still.push((name, expr, span));
                    }
                }
            }
            if still.len() == before {
                if let Some(e) = first_error {
                    return Err(e);
                }
            }
            pending = still;
        }
        Ok(locals)
    }

    /// The JSON value of an expression.
    pub fn value(&self, expr: &Expression) -> Result<Value, JobspecError> {
        match expr {
            Expression::Null(_) => Ok(Value::Null),
            Expression::Bool(b) => Ok(Value::Bool(*b.value())),
            Expression::Number(n) => serde_json::to_value(n.value())
                .map_err(|e| self.src.error(expr.span(), e.to_string())),
            Expression::String(s) => Ok(Value::String(s.value().clone())),
            Expression::Array(items) => items
                .iter()
                .map(|item| self.value(item))
                .collect::<Result<Vec<_>, _>>()
                .map(Value::Array),
            Expression::Object(object) => self.object(object).map(Value::Object),
            Expression::StringTemplate(t) => self.template(expr, t.iter()),
            Expression::HeredocTemplate(h) => self.template(expr, h.template.iter()),
            Expression::Parenthesis(p) => self.value(p.inner()),
            _ => self.evaluate(expr),
        }
    }

    fn object(&self, object: &Object) -> Result<Map<String, Value>, JobspecError> {
        let mut out = Map::new();
        for (key, value) in object.iter() {
            let name = match key {
                ObjectKey::Ident(ident) => ident.as_str().to_string(),
                ObjectKey::Expression(e) => match self.value(e)? {
                    Value::String(s) => s,
                    Value::Number(n) => n.to_string(),
                    Value::Bool(b) => b.to_string(),
                    other => {
                        return Err(self.src.error(
                            e.span(),
                            format!("object keys must be strings, got {}", kind_of(&other)),
                        ))
                    }
                },
            };
            out.insert(name, self.value(value.expr())?);
        }
        Ok(out)
    }

    /// A string template: literal text plus interpolations. Parse-time
    /// interpolations are evaluated; runtime ones are kept verbatim.
    fn template<'e>(
        &self,
        whole: &Expression,
        elements: impl Iterator<Item = &'e Element>,
    ) -> Result<Value, JobspecError> {
        let mut out = String::new();
        for element in elements {
            match element {
                Element::Literal(text) => out.push_str(text.value()),
                Element::Interpolation(interp) => match self.interpolation(&interp.expr)? {
                    Some(text) => out.push_str(&text),
                    None => {
                        let span = interp.span();
                        let raw = span.as_ref().and_then(|s| self.src.slice(s));
                        out.push_str(raw.ok_or_else(|| {
                            self.src
                                .error(span.clone(), "interpolation without source text")
                        })?);
                    }
                },
                // `%{ if }` / `%{ for }` directives: let hcl-rs render the
                // whole template (runtime references cannot appear in them).
                Element::Directive(_) => return self.evaluate(whole),
            }
        }
        Ok(Value::String(out))
    }

    /// `Some(text)` for an interpolation resolved now, `None` for a runtime
    /// reference to keep literally.
    fn interpolation(&self, expr: &Expression) -> Result<Option<String>, JobspecError> {
        let converted: hcl::Expression = expr.clone().into();
        match converted.evaluate(&self.ctx) {
            Ok(value) => {
                let json = hcl_to_json(self.src, expr, value)?;
                match json {
                    Value::String(s) => Ok(Some(s)),
                    Value::Number(n) => Ok(Some(n.to_string())),
                    Value::Bool(b) => Ok(Some(b.to_string())),
                    other => Err(self.src.error(
                        expr.span(),
                        format!("cannot interpolate {} into a string", kind_of(&other)),
                    )),
                }
            }
            Err(e) => match e.kind() {
                ErrorKind::UndefinedVar(root) if !PARSE_TIME_ROOTS.contains(&root.as_str()) => {
                    Ok(None)
                }
                _ => Err(self.src.error(expr.span(), e.to_string())),
            },
        }
    }

    fn evaluate(&self, expr: &Expression) -> Result<Value, JobspecError> {
        let converted: hcl::Expression = expr.clone().into();
        let value = converted
            .evaluate(&self.ctx)
            .map_err(|e| self.src.error(expr.span(), e.to_string()))?;
        hcl_to_json(self.src, expr, value)
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

fn hcl_to_json(src: &Source, expr: &Expression, value: hcl::Value) -> Result<Value, JobspecError> {
    serde_json::to_value(value).map_err(|e| src.error(expr.span(), e.to_string()))
}

fn json_to_hcl(value: Value) -> hcl::Value {
    // Every JSON value has an HCL counterpart; the conversion cannot fail.
    hcl::to_value(value).unwrap_or(hcl::Value::Null)
}

/// How error messages name a value's type.
pub(crate) fn kind_of(value: &Value) -> String {
    match value {
        Value::Null => "null".to_string(),
        Value::Bool(b) => format!("bool {b}"),
        Value::Number(n) => format!("number {n}"),
        Value::String(s) => format!("string {s:?}"),
        Value::Array(_) => "a list".to_string(),
        Value::Object(_) => "an object".to_string(),
    }
}
