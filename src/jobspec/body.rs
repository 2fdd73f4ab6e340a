//! Reading one HCL block body against a schema.
//!
//! A [`BodyReader`] knows where it is (`group "frontend"`), which attributes
//! and blocks are allowed there, and how to read typed values out of
//! attributes with the conversions HCL2's type system makes (a number
//! written as `"3"` is a number, `true` where a string is expected is
//! `"true"`). Every error points at the offending key or value.

use super::describe::kind_of;
use super::duration::parse_go_duration;
use super::eval::Evaluator;
use super::limits::depth_error;
use super::source::Source;
use super::JobspecError;
use hcl::edit::structure::{Attribute, Block, Body};
use hcl::edit::Span;
use serde_json::Value;
use std::collections::BTreeMap;
use std::ops::Range;
use std::time::Duration;

/// What a block may contain.
pub(crate) struct Schema<'a> {
    pub attributes: &'a [&'a str],
    pub blocks: &'a [&'a str],
    /// Nomad attributes and blocks herder accepts but does not model
    /// (service registration, templates, vault, volumes, ...). Rejecting a
    /// valid Nomad job would be worse than ignoring what herder cannot act on.
    pub ignored: &'a [&'a str],
}

pub(crate) struct BodyReader<'s> {
    pub src: &'s Source<'s>,
    pub eval: &'s Evaluator<'s>,
    pub body: &'s Body,
    /// Where this body is, for messages: `group "frontend"`,
    /// `restart block of group "frontend"`.
    pub place: String,
    /// The span of the block's name, where errors about the block as a
    /// whole (a missing required attribute) point.
    pub at: Option<Range<usize>>,
}

impl<'s> BodyReader<'s> {
    /// Rejects attributes and blocks the schema does not list (the
    /// parser already refuses an attribute written twice).
    pub fn check(&self, schema: &Schema) -> Result<(), JobspecError> {
        for attr in self.body.attributes() {
            let key = attr.key.as_str();
            if !schema.attributes.contains(&key) && !schema.ignored.contains(&key) {
                let known = schema.attributes.iter().chain(schema.ignored);
                return Err(self.src.error(
                    attr.key.span(),
                    format!(
                        "unknown attribute {key:?} in {}{}",
                        self.place,
                        suggestion(key, known)
                    ),
                ));
            }
        }
        for block in self.body.blocks() {
            let ident = block.ident.as_str();
            if !schema.blocks.contains(&ident) && !schema.ignored.contains(&ident) {
                let known = schema.blocks.iter().chain(schema.ignored);
                return Err(self.src.error(
                    block.ident.span(),
                    format!(
                        "unknown block {ident:?} in {}{}",
                        self.place,
                        suggestion(ident, known)
                    ),
                ));
            }
        }
        Ok(())
    }

    /// A reader for a nested block, checking it has `labels` labels
    /// (described as `label_what`, e.g. "its name").
    pub fn child(
        &self,
        block: &'s Block,
        labels: usize,
        label_what: &str,
    ) -> Result<(BodyReader<'s>, Vec<String>), JobspecError> {
        let ident = block.ident.as_str();
        if block.labels.len() != labels {
            let message = match labels {
                0 => format!("block {ident:?} in {} takes no labels", self.place),
                _ => format!(
                    "block {ident:?} in {} needs {labels} label ({label_what}), got {}",
                    self.place,
                    block.labels.len()
                ),
            };
            return Err(self.src.error(block.ident.span(), message));
        }
        let names: Vec<String> = block
            .labels
            .iter()
            .map(|l| l.as_str().to_string())
            .collect();
        let place = match names.first() {
            Some(name) => format!("{ident} {name:?}"),
            None => format!("{ident} block of {}", self.place),
        };
        Ok((
            BodyReader {
                src: self.src,
                eval: self.eval,
                body: &block.body,
                place,
                at: block.ident.span(),
            },
            names,
        ))
    }

    /// The blocks of one kind, in file order.
    pub fn blocks(&self, ident: &'s str) -> impl Iterator<Item = &'s Block> + 's {
        self.body.get_blocks(ident)
    }

    /// The single block of a kind; two of them is an error.
    pub fn single_block(&self, ident: &'s str) -> Result<Option<&'s Block>, JobspecError> {
        let mut blocks = self.body.get_blocks(ident);
        let first = blocks.next();
        if let Some(second) = blocks.next() {
            return Err(self.src.error(
                second.ident.span(),
                format!("only one {ident:?} block is allowed in {}", self.place),
            ));
        }
        Ok(first)
    }

    /// The reader for the single unlabeled block of a kind, if present.
    pub fn single_child(&self, ident: &'s str) -> Result<Option<BodyReader<'s>>, JobspecError> {
        match self.single_block(ident)? {
            Some(block) => Ok(Some(self.child(block, 0, "")?.0)),
            None => Ok(None),
        }
    }

    fn attribute(&self, name: &str) -> Option<&'s Attribute> {
        self.body.get_attribute(name)
    }

    /// The evaluated value of an attribute, with the attribute for errors.
    fn raw(&self, name: &str) -> Result<Option<(Value, &'s Attribute)>, JobspecError> {
        match self.attribute(name) {
            Some(attr) => Ok(Some((self.eval.value(&attr.value)?, attr))),
            None => Ok(None),
        }
    }

    fn type_error(&self, attr: &Attribute, want: &str, got: &Value) -> JobspecError {
        self.src.error(
            attr.value.span(),
            format!(
                "invalid value for {:?} in {}: {want} is required, got {}",
                attr.key.as_str(),
                self.place,
                kind_of(got)
            ),
        )
    }

    /// Any value, as JSON (free-form driver config, artifact options).
    pub fn json(&self, name: &str) -> Result<Option<Value>, JobspecError> {
        Ok(self.raw(name)?.map(|(v, _)| v))
    }

    pub fn string(&self, name: &str) -> Result<Option<String>, JobspecError> {
        match self.attribute(name) {
            Some(attr) => self.string_of(attr).map(Some),
            None => Ok(None),
        }
    }

    /// The string value of an attribute in hand (looking each attribute of
    /// a large block up by name again would take quadratic time).
    fn string_of(&self, attr: &Attribute) -> Result<String, JobspecError> {
        let value = self.eval.value(&attr.value)?;
        as_string(&value).ok_or_else(|| self.type_error(attr, "a string", &value))
    }

    pub fn int(&self, name: &str) -> Result<Option<i64>, JobspecError> {
        let Some((value, attr)) = self.raw(name)? else {
            return Ok(None);
        };
        let number = match &value {
            Value::Number(n) => n.as_i64().or_else(|| whole(n.as_f64())),
            Value::String(s) => s.trim().parse::<i64>().ok(),
            _ => None,
        };
        number
            .map(Some)
            .ok_or_else(|| self.type_error(attr, "a whole number", &value))
    }

    /// An integer that must fit the field's type (`weight` is -100..100
    /// in an i8, `percent` a u8, `count` an i32).
    pub fn int_as<T: TryFrom<i64>>(&self, name: &str) -> Result<Option<T>, JobspecError> {
        let Some(n) = self.int(name)? else {
            return Ok(None);
        };
        let attr = self.attribute(name);
        T::try_from(n).map(Some).map_err(|_| {
            self.src.error(
                attr.and_then(|a| a.value.span()),
                format!("value {n} for {name:?} in {} is out of range", self.place),
            )
        })
    }

    pub fn bool(&self, name: &str) -> Result<Option<bool>, JobspecError> {
        let Some((value, attr)) = self.raw(name)? else {
            return Ok(None);
        };
        let b = match &value {
            Value::Bool(b) => Some(*b),
            Value::String(s) if s == "true" => Some(true),
            Value::String(s) if s == "false" => Some(false),
            _ => None,
        };
        b.map(Some)
            .ok_or_else(|| self.type_error(attr, "a bool", &value))
    }

    /// A Go duration string (or, as Nomad allows, integer nanoseconds).
    pub fn duration(&self, name: &str) -> Result<Option<Duration>, JobspecError> {
        let Some((value, attr)) = self.raw(name)? else {
            return Ok(None);
        };
        match &value {
            Value::String(s) => parse_go_duration(s).map(Some).map_err(|e| {
                self.src.error(
                    attr.value.span(),
                    format!(
                        "invalid value for {:?} in {}: {e}",
                        attr.key.as_str(),
                        self.place
                    ),
                )
            }),
            Value::Number(n) => match n.as_u64() {
                Some(nanos) => Ok(Some(Duration::from_nanos(nanos))),
                None => Err(self.type_error(attr, "a duration like \"30s\"", &value)),
            },
            _ => Err(self.type_error(attr, "a duration like \"30s\"", &value)),
        }
    }

    pub fn strings(&self, name: &str) -> Result<Option<Vec<String>>, JobspecError> {
        let Some((value, attr)) = self.raw(name)? else {
            return Ok(None);
        };
        let Value::Array(items) = &value else {
            return Err(self.type_error(attr, "a list of strings", &value));
        };
        items
            .iter()
            .map(|item| {
                as_string(item).ok_or_else(|| self.type_error(attr, "a list of strings", item))
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    }

    /// A string map written either as a block (`meta { k = "v" }`) or as
    /// an attribute (`meta = { "k.x" = "v" }`, needed for keys that are
    /// not identifiers); both at once is an error, as in Nomad.
    pub fn string_map(&self, name: &'s str) -> Result<BTreeMap<String, String>, JobspecError> {
        let block = self.single_block(name)?;
        let attr = self.attribute(name);
        match (attr, block) {
            (Some(_), Some(block)) => Err(self.src.error(
                block.ident.span(),
                format!(
                    "{name:?} is set both as an attribute and as a block in {}",
                    self.place
                ),
            )),
            (Some(attr), None) => {
                let value = self.eval.value(&attr.value)?;
                let Value::Object(map) = &value else {
                    return Err(self.type_error(attr, "a map of strings", &value));
                };
                map.iter()
                    .map(|(k, v)| {
                        as_string(v)
                            .map(|s| (k.clone(), s))
                            .ok_or_else(|| self.type_error(attr, "a map of strings", v))
                    })
                    .collect()
            }
            (None, Some(block)) => {
                let (reader, _) = self.child(block, 0, "")?;
                if let Some(inner) = block.body.blocks().next() {
                    return Err(self.src.error(
                        inner.ident.span(),
                        format!(
                            "unknown block {:?} in {}",
                            inner.ident.as_str(),
                            reader.place
                        ),
                    ));
                }
                block
                    .body
                    .attributes()
                    .map(|a| Ok((a.key.as_str().to_string(), reader.string_of(a)?)))
                    .collect()
            }
            (None, None) => Ok(BTreeMap::new()),
        }
    }

    /// The whole body as a free-form JSON object: attributes become keys,
    /// nested blocks become lists of objects under their name (keyed
    /// further by their labels), the shape Nomad's JSON job form uses.
    pub fn free_form(&self) -> Result<serde_json::Map<String, Value>, JobspecError> {
        self.free_form_nested().map(|(map, _)| map)
    }

    /// [`BodyReader::free_form`] and how deeply the object nests. Labels
    /// nest too (`a "x" "y" {}` is `{"a": [{"x": {"y": {}}}]}`), and a
    /// block may have any number of them, so the depth is checked before
    /// the object is built: nothing deeper than the evaluator's values
    /// leaves the parser.
    fn free_form_nested(&self) -> Result<(serde_json::Map<String, Value>, usize), JobspecError> {
        let max_depth = self.eval.max_depth();
        let mut out = serde_json::Map::new();
        let mut depth = 1;
        for attr in self.body.attributes() {
            let value = self.eval.value(&attr.value)?;
            depth = depth.max(1 + json_depth(&value));
            out.insert(attr.key.as_str().to_string(), value);
        }
        for block in self.body.blocks() {
            let (reader, labels) = self.child(block, block.labels.len(), "")?;
            let (inner, inner_depth) = reader.free_form_nested()?;
            // The object, one level per label, the list, this object.
            let block_depth = inner_depth.saturating_add(labels.len()).saturating_add(2);
            if block_depth > max_depth {
                let offset = block.ident.span().map_or(0, |s| s.start);
                return Err(depth_error(self.src, offset, max_depth, "a block nested"));
            }
            depth = depth.max(block_depth);
            let mut value = Value::Object(inner);
            for label in labels.iter().rev() {
                let mut wrapped = serde_json::Map::new();
                wrapped.insert(label.clone(), value);
                value = Value::Object(wrapped);
            }
            let entry = out
                .entry(block.ident.as_str().to_string())
                .or_insert_with(|| Value::Array(Vec::new()));
            match entry {
                Value::Array(items) => items.push(value),
                _ => {
                    return Err(self.src.error(
                        block.ident.span(),
                        format!(
                            "{:?} is set both as an attribute and as a block in {}",
                            block.ident.as_str(),
                            self.place
                        ),
                    ))
                }
            }
        }
        Ok((out, depth))
    }
}

/// How deeply a JSON value nests (0 for a scalar). Values come from the
/// evaluator, which bounds their depth, so this recursion is bounded.
fn json_depth(value: &Value) -> usize {
    match value {
        Value::Array(items) => 1 + items.iter().map(json_depth).max().unwrap_or(0),
        Value::Object(map) => 1 + map.values().map(json_depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// HCL2's string conversion: numbers and bools become their text.
fn as_string(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

fn whole(f: Option<f64>) -> Option<i64> {
    f.filter(|f| f.fract() == 0.0 && f.abs() < 9.0e15)
        .map(|f| f as i64)
}

/// `; did you mean "network"?` when a known name is one or two edits away.
fn suggestion<'a>(key: &str, known: impl Iterator<Item = &'a &'a str>) -> String {
    known
        .map(|k| (edit_distance(key, k), *k))
        .filter(|(d, _)| *d <= 2)
        .min()
        .map(|(_, k)| format!("; did you mean {k:?}?"))
        .unwrap_or_default()
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = if ca == *cb {
                prev
            } else {
                1 + prev.min(cur).min(row[j])
            };
            prev = cur;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggestions_need_a_close_known_name() {
        let known = ["network", "task", "restart"];
        assert_eq!(
            suggestion("nework", known.iter()),
            "; did you mean \"network\"?"
        );
        assert_eq!(suggestion("tsak", known.iter()), "; did you mean \"task\"?");
        assert_eq!(suggestion("volume", known.iter()), "");
    }
}
