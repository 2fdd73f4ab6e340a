//! A linear scan of HCL text, run before the text reaches `hcl-edit`'s
//! parser, that bounds how deeply it nests and how large a syntax tree it
//! makes.
//!
//! Depth: the parser is recursive descent. Each bracket, brace,
//! parenthesis, quoted string, `${ }` interpolation, `%{ if }`/`%{ for }`
//! directive body, unary operator and binary or conditional operator
//! chained in one expression is at least one level of recursion, and
//! several kilobytes of stack per level (measured: up to ~11 KiB for
//! `[for x in [...`). A few kilobytes of `[[[[` therefore overflow any
//! thread's stack and abort the process. Everything recursive that runs
//! later (the evaluator, the conversion to JSON, dropping the syntax tree)
//! is no deeper than what the parser built.
//!
//! Size: the syntax tree costs far more than its text (measured: ~300
//! bytes for the four characters of `a.b,` in a list, 1 KiB per `f(x)`),
//! and `hcl-edit` stores an object's keys in a vector it searches on every
//! insert, so an object of n keys costs n²/2 comparisons (20,000 keys in
//! 170 KB of text take seconds). The scan charges the file's [`Budget`]
//! [`SYNTAX_TOKEN_BYTES`] per token and one byte per earlier item for each
//! item of a `{ }`, so both stay within `max_expansion_bytes` before the
//! parser allocates anything.
//!
//! The scan follows the parser's lexical rules (comments, quoted strings
//! and their escapes, heredocs, template sequences and their `$${`/`%%{`
//! escapes, identifiers with `-`, numbers with exponents) closely enough
//! that it never takes text the parser reads as code for a string or a
//! comment, and counts depth conservatively:
//! - every open bracket, brace, parenthesis, quoted string, heredoc,
//!   interpolation and directive header is a level until it closes;
//! - every `%{ if }` or `%{ for }` is a level until its `%{ endif }` or
//!   `%{ endfor }`;
//! - every operator character (`! - + * / % < > & | ?` and `==`) is a
//!   level until the expression it belongs to ends, which is at a `,` or
//!   where an operand directly follows another operand (`a = 1` then
//!   `b = 2` on the next line, `for x in xs`): the parser cannot continue an
//!   expression there, so its operator recursion has unwound.
//!
//! A real job nests about a dozen levels and has a few thousand tokens;
//! over-counting (`**` counts two, a splat's `*` counts one) only matters
//! to absurd text.

use super::error::JobspecError;
use super::limits::{depth_error, syntax_size_error, Budget, HclLimits};
use super::source::Source;

/// What one token of code is charged for the syntax tree it becomes:
/// a little more than the largest cost per token measured (`a.b` in a
/// list, ~300 bytes a token).
pub(crate) const SYNTAX_TOKEN_BYTES: usize = 320;

/// What opened a level of nesting.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// `{`: a block body or an object.
    Brace,
    /// `(`: parentheses or a function call's arguments.
    Paren,
    /// `[`: a list, a `for` expression or an index.
    Bracket,
    /// `${`: an interpolation, code up to its `}`.
    Interpolation,
    /// `%{`: a directive header, code up to its `}`; the keyword says
    /// whether it opens (`if`, `for`) or closes (`endif`, `endfor`) a body.
    Directive(Keyword),
    /// `"`: a quoted string (a template).
    Quoted,
    /// `<<EOF`: a heredoc (a template); the delimiter is
    /// `text[start..start + len]`.
    Heredoc { start: usize, len: usize },
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Keyword {
    Opens,
    Closes,
    Other,
}

/// Where the scan is in an expression, to tell operand juxtaposition (a
/// new expression) from continuation.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Last {
    /// Nothing yet, or an operator or separator: what comes next continues
    /// the expression.
    Continues,
    /// An operand ended (identifier, number, string, closing bracket): an
    /// operand next starts a new expression.
    Operand,
}

struct Frame {
    kind: Kind,
    /// Operators counted in the current expression of this frame.
    operators: usize,
    /// Open `%{ if }`/`%{ for }` bodies, in template frames.
    directives: usize,
    /// Items (attributes, blocks, object entries) seen so far in a brace.
    items: usize,
    last: Last,
}

impl Frame {
    fn new(kind: Kind) -> Self {
        Frame {
            kind,
            operators: 0,
            directives: 0,
            items: 0,
            last: Last::Continues,
        }
    }

    /// The levels this frame holds: itself plus what is open inside it.
    fn weight(&self) -> usize {
        1 + self.operators + self.directives
    }

    fn is_template(&self) -> bool {
        matches!(self.kind, Kind::Quoted | Kind::Heredoc { .. })
    }
}

/// Why the scan refused the text, and the byte offset where.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// Nesting passed `max_depth` levels.
    TooDeep(usize),
    /// The syntax tree would pass the budget.
    TooLarge(usize),
    /// A heredoc closes on its first line (see `heredoc_start`).
    EmptyHeredoc(usize),
}

/// Scans HCL text (a whole body, or one expression), charging `budget` for
/// its syntax tree, and fails at the first byte where nesting passes
/// `max_depth` levels or the budget runs out.
pub(crate) fn scan(text: &str, max_depth: usize, budget: &Budget) -> Result<(), Refused> {
    Scanner {
        bytes: text.as_bytes(),
        text,
        pos: 0,
        // The file's top-level body, which the parser does not recurse for.
        stack: vec![Frame::new(Kind::Brace)],
        depth: 0,
        max_depth,
        budget,
    }
    .run()
}

struct Scanner<'a> {
    text: &'a str,
    bytes: &'a [u8],
    pos: usize,
    stack: Vec<Frame>,
    /// The sum of the weights of every frame but the root.
    depth: usize,
    max_depth: usize,
    budget: &'a Budget,
}

impl Scanner<'_> {
    fn run(mut self) -> Result<(), Refused> {
        while self.pos < self.bytes.len() {
            if self.top().is_template() {
                self.template_text()?;
            } else {
                self.code()?;
            }
        }
        Ok(())
    }

    fn top(&self) -> &Frame {
        // The root frame is never popped.
        &self.stack[self.stack.len() - 1]
    }

    fn top_mut(&mut self) -> &mut Frame {
        let last = self.stack.len() - 1;
        &mut self.stack[last]
    }

    fn peek(&self, offset: usize) -> u8 {
        self.bytes.get(self.pos + offset).copied().unwrap_or(0)
    }

    fn rest(&self) -> &str {
        self.text.get(self.pos..).unwrap_or("")
    }

    /// One more level at the current position, failing past the limit.
    fn deeper(&mut self) -> Result<(), Refused> {
        self.depth += 1;
        if self.depth > self.max_depth {
            return Err(Refused::TooDeep(self.pos));
        }
        Ok(())
    }

    /// One token of syntax: charged for the tree node it becomes.
    fn token(&self) -> Result<(), Refused> {
        self.budget
            .charge(SYNTAX_TOKEN_BYTES)
            .map_err(|_| Refused::TooLarge(self.pos))
    }

    /// Another item in the current brace: the parser compares an object's
    /// new key with every earlier one, a byte of budget each.
    fn item(&mut self) -> Result<(), Refused> {
        let frame = self.top_mut();
        if frame.kind != Kind::Brace {
            return Ok(());
        }
        frame.items += 1;
        let items = frame.items;
        self.budget
            .charge(items)
            .map_err(|_| Refused::TooLarge(self.pos))
    }

    fn push(&mut self, kind: Kind) -> Result<(), Refused> {
        self.stack.push(Frame::new(kind));
        self.deeper()
    }

    /// Closes the innermost frame; the construct it was is an operand of
    /// the frame around it.
    fn pop(&mut self) -> Option<Frame> {
        if self.stack.len() == 1 {
            // A closer with nothing open: the parser reports it.
            return None;
        }
        let frame = self.stack.pop()?;
        self.depth -= frame.weight();
        self.top_mut().last = Last::Operand;
        Some(frame)
    }

    /// An operand starts: directly after another operand it begins a new
    /// expression, whose operators the parser has not entered yet.
    fn operand_starts(&mut self) -> Result<(), Refused> {
        let frame = self.top_mut();
        if frame.last == Last::Operand {
            let unwound = frame.operators;
            frame.operators = 0;
            self.depth -= unwound;
            self.item()?;
        }
        Ok(())
    }

    /// An operator: a level until the expression ends.
    fn operator(&mut self, len: usize) -> Result<(), Refused> {
        self.top_mut().operators += 1;
        self.top_mut().last = Last::Continues;
        self.deeper()?;
        self.pos += len;
        Ok(())
    }

    /// One token of code (or skipped whitespace or comment).
    fn code(&mut self) -> Result<(), Refused> {
        if self.skip_trivia() {
            return Ok(());
        }
        self.token()?;
        let b = self.peek(0);
        match b {
            b'"' => {
                self.operand_starts()?;
                self.push(Kind::Quoted)?;
                self.pos += 1;
            }
            b'{' => {
                self.push(Kind::Brace)?;
                self.pos += 1;
            }
            b'(' => {
                self.push(Kind::Paren)?;
                self.pos += 1;
            }
            b'[' => {
                self.push(Kind::Bracket)?;
                self.pos += 1;
            }
            b'}' | b')' | b']' => self.close()?,
            b',' => self.item_separator()?,
            b'<' if self.peek(1) == b'<' && self.heredoc_start()? => {}
            b'=' if self.peek(1) == b'=' => self.operator(2)?,
            b'&' if self.peek(1) == b'&' => self.operator(2)?,
            b'|' if self.peek(1) == b'|' => self.operator(2)?,
            b'!' | b'-' | b'+' | b'*' | b'/' | b'%' | b'<' | b'>' | b'&' | b'|' | b'?' => {
                self.operator(1)?
            }
            // `=`, `=>`, `:`, `.`, `...` and `::` join the parts of one
            // construct; what follows them continues it.
            b'=' | b':' | b'.' => {
                self.top_mut().last = Last::Continues;
                self.pos += 1;
            }
            b'0'..=b'9' => {
                self.operand_starts()?;
                self.number();
                self.top_mut().last = Last::Operand;
            }
            // Every non-ASCII character is taken for part of a name, so that
            // a name here is never shorter than the parser's (see
            // `name_len`).
            _ if b.is_ascii_alphabetic() || b == b'_' || b >= 0x80 => self.identifier()?,
            // Anything else is a syntax error the parser reports; it
            // cannot hide nesting.
            _ => self.pos += 1,
        }
        Ok(())
    }

    /// Skips whitespace (and `~` strip markers) or a comment at the
    /// position; false when code starts there.
    fn skip_trivia(&mut self) -> bool {
        match self.peek(0) {
            b' ' | b'\t' | b'\r' | b'\n' | b'~' => self.pos += 1,
            b'#' => self.skip_line(),
            b'/' if self.peek(1) == b'/' => self.skip_line(),
            b'/' if self.peek(1) == b'*' => self.skip_block_comment(),
            _ => return false,
        }
        true
    }

    /// `}`, `)` or `]`: the construct it closes ends.
    fn close(&mut self) -> Result<(), Refused> {
        self.pos += 1;
        if let Some(frame) = self.pop() {
            if let Kind::Directive(keyword) = frame.kind {
                self.directive_closed(keyword)?;
            }
        }
        Ok(())
    }

    /// `,`: items of lists, objects and arguments are separate
    /// expressions, so the operators chained in the last one unwind.
    fn item_separator(&mut self) -> Result<(), Refused> {
        let frame = self.top_mut();
        let unwound = frame.operators;
        frame.operators = 0;
        frame.last = Last::Continues;
        self.depth -= unwound;
        self.item()?;
        self.pos += 1;
        Ok(())
    }

    /// An identifier: letters, digits, `_` and `-` (HCL allows dashes in
    /// names, so `a-b` is one name, not a subtraction).
    fn identifier(&mut self) -> Result<(), Refused> {
        self.operand_starts()?;
        let len = name_len(self.rest());
        self.pos += len.max(1);
        self.top_mut().last = Last::Operand;
        Ok(())
    }

    /// A number as the parser reads it: digits, an optional fraction and an
    /// optional exponent whose sign is part of the number.
    fn number(&mut self) {
        self.skip_digits();
        if self.peek(0) == b'.' && self.peek(1).is_ascii_digit() {
            self.pos += 1;
            self.skip_digits();
        }
        if matches!(self.peek(0), b'e' | b'E') {
            let sign = usize::from(matches!(self.peek(1), b'+' | b'-'));
            if self.peek(1 + sign).is_ascii_digit() {
                self.pos += 1 + sign;
                self.skip_digits();
            }
        }
    }

    fn skip_digits(&mut self) {
        while self.peek(0).is_ascii_digit() {
            self.pos += 1;
        }
    }

    fn skip_line(&mut self) {
        match self.rest().find('\n') {
            Some(i) => self.pos += i,
            None => self.pos = self.bytes.len(),
        }
    }

    fn skip_block_comment(&mut self) {
        match self.rest().get(2..).and_then(|r| r.find("*/")) {
            Some(i) => self.pos += 2 + i + 2,
            None => self.pos = self.bytes.len(),
        }
    }

    /// `<<EOF` or `<<-EOF` followed by a line end opens a heredoc; anything
    /// else is two `<` operators (`false` returned, nothing consumed).
    fn heredoc_start(&mut self) -> Result<bool, Refused> {
        let dash = usize::from(self.peek(2) == b'-');
        let name_start = self.pos + 2 + dash;
        let after = self.text.get(name_start..).unwrap_or("");
        let name_len = name_len(after);
        let starts_name = after
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || !c.is_ascii());
        let line_end = match after.as_bytes().get(name_len..) {
            Some([b'\n', ..]) => 1,
            Some([b'\r', b'\n', ..]) => 2,
            _ => 0,
        };
        if !starts_name || line_end == 0 {
            return Ok(false);
        }
        self.operand_starts()?;
        self.push(Kind::Heredoc {
            start: name_start,
            len: name_len,
        })?;
        self.pos = name_start + name_len + line_end;
        // A heredoc whose first line is its delimiter is empty only if no
        // later line is: the parser first reads the body up to the next
        // delimiter line, and falls back to "empty" when that fails, which
        // an interpolation in the body can make it do. The scan cannot
        // follow both readings, so it refuses this one.
        if self.at_delimiter().is_some() {
            return Err(Refused::EmptyHeredoc(self.pos));
        }
        Ok(true)
    }

    /// At a heredoc line start: the length of blanks and the delimiter when
    /// they begin the line (the parser matches the delimiter as a prefix).
    fn at_delimiter(&self) -> Option<usize> {
        let Kind::Heredoc { start, len } = self.top().kind else {
            return None;
        };
        let delimiter = self.text.get(start..start + len).unwrap_or("");
        let rest = self.rest();
        let indent = rest.len() - rest.trim_start_matches([' ', '\t']).len();
        rest[indent..]
            .starts_with(delimiter)
            .then_some(indent + len)
    }

    /// Template text: literal characters up to a template sequence or the
    /// end of the string or heredoc.
    fn template_text(&mut self) -> Result<(), Refused> {
        // Inside a `%{ if }` or `%{ for }` body the parser reads text up to
        // the next template sequence only: a `"` does not end the string, a
        // `\` escapes nothing, and a heredoc's delimiter does not end it.
        let frame = self.top();
        let in_body = frame.directives > 0;
        let quoted = frame.kind == Kind::Quoted && !in_body;
        let heredoc = matches!(frame.kind, Kind::Heredoc { .. }) && !in_body;
        match (self.peek(0), self.peek(1), self.peek(2)) {
            // `$${` and `%%{` are the escapes for literal `${` and `%{`.
            (b'$', b'$', b'{') | (b'%', b'%', b'{') => self.pos += 3,
            (b'$', b'{', _) => {
                self.token()?;
                self.push(Kind::Interpolation)?;
                self.pos += 2;
            }
            (b'%', b'{', _) => {
                self.token()?;
                let keyword = self.directive_keyword(2);
                self.push(Kind::Directive(keyword))?;
                self.pos += 2;
            }
            (b'\\', _, _) if quoted => {
                // An escape: the escaped character is text, even `"`.
                self.pos += 2;
            }
            (b'"', _, _) if quoted => {
                self.pos += 1;
                self.pop();
            }
            (b'\n', _, _) if heredoc => {
                self.pos += 1;
                if let Some(len) = self.at_delimiter() {
                    self.pos += len;
                    self.pop();
                }
            }
            _ => self.pos += 1,
        }
        Ok(())
    }

    /// Which directive a `%{` starts, read past `~`, blanks and comments.
    fn directive_keyword(&self, skip: usize) -> Keyword {
        let mut rest = self
            .rest()
            .get(skip..)
            .unwrap_or("")
            .trim_start_matches('~');
        loop {
            let trimmed = rest.trim_start();
            if let Some(comment) = trimmed.strip_prefix("/*") {
                rest = comment.split_once("*/").map_or("", |(_, after)| after);
            } else if trimmed.starts_with('#') || trimmed.starts_with("//") {
                rest = trimmed.split_once('\n').map_or("", |(_, after)| after);
            } else {
                rest = trimmed;
                break;
            }
        }
        // The parser matches the keyword as a prefix (`%{iffy}` is `if fy`),
        // so the scan does too.
        if rest.starts_with("if") || rest.starts_with("for") {
            Keyword::Opens
        } else if rest.starts_with("endif") || rest.starts_with("endfor") {
            Keyword::Closes
        } else {
            Keyword::Other
        }
    }

    /// A directive header closed: `if` and `for` open a body level in the
    /// template around them until `endif` or `endfor` closes it.
    fn directive_closed(&mut self, keyword: Keyword) -> Result<(), Refused> {
        if !self.top().is_template() {
            return Ok(());
        }
        match keyword {
            Keyword::Opens => {
                self.top_mut().directives += 1;
                self.deeper()
            }
            Keyword::Closes => {
                let frame = self.top_mut();
                if frame.directives > 0 {
                    frame.directives -= 1;
                    self.depth -= 1;
                }
                Ok(())
            }
            Keyword::Other => Ok(()),
        }
    }
}

/// The length in bytes of the name at the start of `text`: ASCII letters,
/// digits, `_` and `-`, and every non-ASCII character. The parser's names
/// are Unicode identifiers, a subset: where the two differ, the scan's name
/// is the longer one and the parser fails on the character it does not
/// take, so the scan never sees an operator, a new operand or a heredoc
/// line end the parser reads as part of a name.
fn name_len(text: &str) -> usize {
    text.char_indices()
        .find(|(_, c)| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-' || !c.is_ascii()))
        .map_or(text.len(), |(i, _)| i)
}

/// The error for a refused scan.
pub(crate) fn scan_error(src: &Source, refused: Refused, limits: &HclLimits) -> JobspecError {
    match refused {
        Refused::TooDeep(offset) => depth_error(src, offset, limits.max_nesting_depth, "nesting"),
        Refused::TooLarge(offset) => syntax_size_error(src, offset, limits.max_expansion_bytes),
        Refused::EmptyHeredoc(offset) => {
            let (line, column) = src.locate(offset);
            JobspecError::Syntax {
                file: src.file.to_string(),
                line,
                column,
                message: "a heredoc must not close on its first line (the parser cannot tell \
                          an empty heredoc from one that ends at a later delimiter line); \
                          write \"\" for an empty string"
                    .to_string(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn depth_of(text: &str) -> usize {
        // The smallest limit the text passes.
        (0..200)
            .find(|max| scan(text, *max, &Budget::new(usize::MAX)).is_ok())
            .unwrap_or(usize::MAX)
    }

    /// What the scan charges for the text.
    fn cost_of(text: &str) -> usize {
        let budget = Budget::new(usize::MAX);
        assert_eq!(scan(text, 100, &budget), Ok(()));
        budget.used()
    }

    #[test]
    fn brackets_strings_and_templates_each_count_a_level() {
        assert_eq!(depth_of("a = 1\n"), 0);
        assert_eq!(depth_of("a = [[1]]\n"), 2);
        assert_eq!(depth_of("job \"x\" {\n  a = (1)\n}\n"), 2);
        assert_eq!(depth_of("a = \"${\"${x}\"}\"\n"), 4);
        // Two open bodies, and the `%{endif}` header inside them.
        assert_eq!(depth_of("a = \"%{if x}%{if y}z%{endif}%{endif}\"\n"), 4);
        assert_eq!(depth_of("a = <<EOF\n${[1]}\nEOF\nb = [[[1]]]\n"), 3);
    }

    #[test]
    fn operators_count_until_the_expression_ends() {
        assert_eq!(depth_of("a = !!!x\n"), 3);
        assert_eq!(depth_of("a = 1 + 2 * 3\n"), 2);
        // A new attribute starts a new expression; so does a list item.
        assert_eq!(depth_of("a = 1 + 2\nb = 3 + 4\n"), 1);
        assert_eq!(depth_of("a = [1 + 2, 3 + 4]\n"), 2);
        // A newline does not end an expression the parser may continue.
        assert_eq!(depth_of("a = [1]\n+ [2]\n+ [3]\n"), 3);
        // Names with dashes and exponents are not operators.
        assert_eq!(depth_of("a = my-var.x-y + 1e-5\n"), 1);
    }

    #[test]
    fn text_that_is_not_code_does_not_count() {
        assert_eq!(depth_of("# ((((\n// [[[[\n/* {{{{ */\na = 1\n"), 0);
        assert_eq!(depth_of("a = \"(((( \\\" [[[[ $${ %%{\"\n"), 1);
        assert_eq!(depth_of("a = <<-EOT\n  {{{{ ((( \"\n  EOT\nb = 1\n"), 1);
        // A heredoc's delimiter closes it only at the start of a line.
        assert_eq!(depth_of("a = <<EOT\nx EOT [[[\nEOT\n"), 1);
    }

    #[test]
    fn directive_bodies_are_read_as_the_parser_reads_them() {
        // In a directive body `"` is text: the string goes on to the last `"`.
        assert_eq!(depth_of("a = \"%{if x}\"[[[%{endif}\"\nb = [1]\n"), 3);
        // ... and a heredoc's delimiter line does not end the heredoc.
        assert_eq!(
            depth_of("a = <<E\n%{if x}\nE\n\"\n%{endif}\nE\nb = [[[1]]]\n"),
            3
        );
    }

    #[test]
    fn a_heredoc_empty_on_its_first_line_is_refused() {
        let budget = Budget::new(usize::MAX);
        assert_eq!(
            scan("a = <<EOF\n  EOF\n", 10, &budget),
            Err(Refused::EmptyHeredoc(10))
        );
    }

    #[test]
    fn the_first_level_past_the_limit_is_reported() {
        let text = "a = [[[[1]]]]";
        let budget = || Budget::new(usize::MAX);
        assert_eq!(scan(text, 4, &budget()), Ok(()));
        assert_eq!(scan(text, 3, &budget()), Err(Refused::TooDeep(7)));
        // Eleven tokens; a budget for ten runs out at the last `]`.
        assert_eq!(
            scan(text, 4, &Budget::new(10 * SYNTAX_TOKEN_BYTES)),
            Err(Refused::TooLarge(12))
        );
    }

    #[test]
    fn tokens_and_object_items_are_charged() {
        // `a`, `=`, `1`: comments, blanks and template text are free.
        assert_eq!(cost_of("a = 1 # one\n"), 3 * SYNTAX_TOKEN_BYTES);
        assert_eq!(cost_of("a = \"long text\"\n"), 3 * SYNTAX_TOKEN_BYTES);
        // n items of an object cost 1 + 2 + ... + (n - 1) more: the parser
        // compares each key with the earlier ones.
        let object = |n: usize| {
            let items: Vec<String> = (0..n).map(|i| format!("k{i} = 1")).collect();
            format!("a = {{{}}}\n", items.join(", "))
        };
        let tokens = |n: usize| (3 + 4 * n) * SYNTAX_TOKEN_BYTES;
        assert_eq!(cost_of(&object(10)), tokens(10) + 45);
        assert_eq!(cost_of(&object(1000)), tokens(1000) + 499_500);
    }
}
