//! The text being parsed, and turning byte offsets into line and column.
//!
//! `hcl-edit` records byte ranges on every block, attribute, expression and
//! interpolation; errors point at them as one-based line and column
//! (columns count characters, not bytes, so non-ASCII text lines up).

use super::JobspecError;
use std::ops::Range;

pub(crate) struct Source<'a> {
    pub file: &'a str,
    pub text: &'a str,
}

impl<'a> Source<'a> {
    pub fn new(text: &'a str, file: &'a str) -> Self {
        Source { file, text }
    }

    /// One-based (line, column) of a byte offset. Found by counting lines
    /// up to the offset rather than from an index of line starts: an error
    /// is located once, while an index of a file of newlines would cost
    /// eight times the file's size for every parse.
    pub fn locate(&self, offset: usize) -> (usize, usize) {
        let offset = offset.min(self.text.len());
        let before = self.text.as_bytes().get(..offset).unwrap_or_default();
        let line = 1 + before.iter().filter(|&&b| b == b'\n').count();
        let start = before
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |i| i + 1);
        let column = self
            .text
            .get(start..offset)
            .map_or(offset - start, |s| s.chars().count());
        (line, column + 1)
    }

    /// A spec error at the start of `span` (the file start when the parser
    /// recorded no span, which only happens for synthesized nodes).
    pub fn error(&self, span: Option<Range<usize>>, message: impl Into<String>) -> JobspecError {
        let (line, column) = self.locate(span.map_or(0, |s| s.start));
        JobspecError::Spec {
            file: self.file.to_string(),
            line,
            column,
            message: message.into(),
        }
    }

    /// The source text a span covers.
    pub fn slice(&self, span: &Range<usize>) -> Option<&'a str> {
        self.text.get(span.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_map_to_one_based_lines_and_character_columns() {
        let src = Source::new("ab\nc\u{e9}d\n\nx", "f");
        assert_eq!(src.locate(0), (1, 1));
        assert_eq!(src.locate(1), (1, 2));
        assert_eq!(src.locate(3), (2, 1));
        // 'd' follows a two-byte character: byte 6, character column 3.
        assert_eq!(src.locate(6), (2, 3));
        assert_eq!(src.locate(9), (4, 1));
    }
}
