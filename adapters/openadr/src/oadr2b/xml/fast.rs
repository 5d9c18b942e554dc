//! The fast parser: the common subset of XML, read as bytes; `None` means "ask the reference
//! parser" (see the module documentation for what is left to it).

use super::*;

/// Byte classes, looked up in [`CLASS`]: one load per byte in the scanning loops instead of
/// a chain of comparisons.
const WS: u8 = 1;
const NAME: u8 = 2;
/// Ends a run of text: `<`, `&`, and `\r` (which needs line-end normalization).
const TEXT_END: u8 = 4;
/// Ends an attribute value, or makes the fast parser give up on it: both quotes, `<`, `&`.
const VALUE_END: u8 = 8;

/// Whitespace is what XML (and quick-xml) calls whitespace. Any non-ASCII byte is part of a
/// name: the input is UTF-8, and names end at an ASCII byte, so every slice taken is on a
/// char boundary.
static CLASS: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        let b = i as u8;
        t[i] = if matches!(b, b' ' | b'\t' | b'\n') {
            WS
        } else if b == b'\r' {
            WS | TEXT_END
        } else if b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':') || b >= 0x80 {
            NAME
        } else if matches!(b, b'<' | b'&') {
            TEXT_END | VALUE_END
        } else if matches!(b, b'"' | b'\'') {
            VALUE_END
        } else {
            0
        };
        i += 1;
    }
    t
};

fn is(b: u8, class: u8) -> bool {
    CLASS[b as usize] & class != 0
}

fn is_ws(b: u8) -> bool {
    is(b, WS)
}

/// The position of the first byte of `class` in `hay` (its length if none).
fn scan(hay: &[u8], class: u8) -> usize {
    hay.iter().position(|&b| is(b, class)).unwrap_or(hay.len())
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Most attributes in one start tag that the fast parser checks for duplicates itself.
const MAX_FAST_ATTRIBUTES: usize = 32;

/// The byte cursor over the document.
struct Cursor<'a> {
    text: &'a str,
    b: &'a [u8],
    p: usize,
}

impl<'a> Cursor<'a> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.p).copied()
    }

    fn rest(&self) -> &'a [u8] {
        self.b.get(self.p..).unwrap_or_default()
    }

    fn skip_ws(&mut self) {
        while self.peek().is_some_and(is_ws) {
            self.p += 1;
        }
    }

    /// A name at the cursor (at least one byte).
    fn name(&mut self) -> Option<&'a str> {
        let start = self.p;
        self.p += self
            .rest()
            .iter()
            .position(|&b| !is(b, NAME))
            .unwrap_or(self.rest().len());
        if self.p == start {
            return None;
        }
        self.text.get(start..self.p)
    }

    /// Text up to the next markup or reference; also says whether it has a `\r`.
    fn text(&mut self) -> (usize, bool) {
        let start = self.p;
        self.p += scan(self.rest(), TEXT_END);
        let mut cr = false;
        while self.peek() == Some(b'\r') {
            cr = true;
            self.p += 1;
            self.p += scan(self.rest(), TEXT_END);
        }
        (start, cr)
    }

    /// `name="value"` or `name='value'` at the cursor; values with `<` or `&` are left to the
    /// reference parser.
    fn attribute(&mut self) -> Option<(&'a str, &'a str)> {
        let name = self.name()?;
        if self.peek()? != b'=' {
            return None;
        }
        self.p += 1;
        let quote = self.peek()?;
        if quote != b'"' && quote != b'\'' {
            return None;
        }
        self.p += 1;
        let start = self.p;
        loop {
            self.p += scan(self.rest(), VALUE_END);
            match self.peek()? {
                b if b == quote => break,
                b'<' | b'&' => return None,
                // The other quote.
                _ => self.p += 1,
            }
        }
        let value = self.text.get(start..self.p)?;
        self.p += 1;
        Some((name, value))
    }
}

/// A leading `<?xml …?>` declaration: at most three plain attributes, each after
/// whitespace, and an encoding (if any) of UTF-8. Leaves the cursor after it.
fn declaration(c: &mut Cursor<'_>) -> Option<()> {
    c.p = 5; // after `<?xml`
    let mut seen: [&str; 3] = [""; 3];
    let mut n = 0;
    loop {
        let before = c.p;
        c.skip_ws();
        if c.b.get(c.p..c.p + 2)? == b"?>" {
            c.p += 2;
            return Some(());
        }
        if c.p == before || n == seen.len() {
            return None;
        }
        let (name, value) = c.attribute()?;
        if seen[..n].contains(&name) || value.contains(['?', '>']) {
            return None;
        }
        if name == "encoding" && !value.eq_ignore_ascii_case("utf-8") && !value.eq_ignore_ascii_case("utf8") {
            return None;
        }
        seen[n] = name;
        n += 1;
    }
}

/// Parses `text` (UTF-8 already checked, BOM removed), or returns `None` to leave it to the
/// reference parser.
pub(in crate::oadr2b) fn parse<'a>(text: &'a str, limits: &Limits) -> Option<Tree<'a>> {
    let b = text.as_bytes();
    let mut c = Cursor { text, b, p: 0 };
    // About one element per 40 bytes in OpenADR documents: one allocation for most.
    let mut t = Builder::new(b.len() / 32 + 4);
    // Namespace declarations in scope: (prefix, namespace, depth of the declaring element).
    let mut scopes: Vec<(&'a str, Ns, usize)> = Vec::with_capacity(16);
    // The qualified name of each open element, for its end tag.
    let mut qnames: Vec<&'a str> = Vec::with_capacity(16);
    // The attribute names of the current start tag, to refuse duplicates.
    let mut attrs: Vec<&'a str> = Vec::with_capacity(8);
    if b.starts_with(b"<?xml") && b.get(5).copied().is_some_and(is_ws) {
        declaration(&mut c)?;
    }
    loop {
        // Text up to the next markup or reference.
        let (start, cr) = c.text();
        if c.p > start {
            let chunk = text.get(start..c.p)?;
            if t.depth() == 0 {
                if !chunk.bytes().all(is_ws) {
                    return None;
                }
            } else if cr {
                // Line ends normalized exactly as the reference parser does.
                t.push_text(BytesText::from_escaped(chunk).xml10_content(), 0).ok()?;
            } else {
                t.push_text(Cow::Borrowed(chunk), 0).ok()?;
            }
        }
        let Some(ch) = c.peek() else { break };
        if ch == b'&' {
            let rest = b.get(c.p + 1..)?;
            let (s, len) = if rest.starts_with(b"lt;") {
                ("<", 3)
            } else if rest.starts_with(b"gt;") {
                (">", 3)
            } else if rest.starts_with(b"amp;") {
                ("&", 4)
            } else if rest.starts_with(b"quot;") {
                ("\"", 5)
            } else if rest.starts_with(b"apos;") {
                ("'", 5)
            } else {
                return None;
            };
            if t.depth() == 0 {
                return None;
            }
            t.push_text(Cow::Borrowed(s), 0).ok()?;
            c.p += 1 + len;
            continue;
        }
        // Markup.
        match b.get(c.p + 1)? {
            b'/' => {
                let qname = qnames.pop()?;
                let from = c.p + 2;
                let to = from + qname.len();
                if !short_eq(text.get(from..to)?, qname) || b.get(to) != Some(&b'>') {
                    return None;
                }
                let depth = qnames.len();
                while scopes.last().is_some_and(|&(_, _, d)| d >= depth) {
                    scopes.pop();
                }
                t.close().ok()?;
                c.p = to + 1;
            }
            b'!' => {
                // Only comments; the reference parser ignores them too.
                if !b.get(c.p..)?.starts_with(b"<!--") {
                    return None;
                }
                let from = c.p + 4;
                c.p = from + find(b.get(from..)?, b"-->")? + 3;
            }
            _ => {
                if t.root_closed() {
                    return None;
                }
                c.p += 1;
                let qname = c.name()?;
                let depth = t.depth();
                attrs.clear();
                let empty = loop {
                    match c.peek()? {
                        b'>' => {
                            c.p += 1;
                            break false;
                        }
                        b'/' => {
                            if c.b.get(c.p + 1) != Some(&b'>') {
                                return None;
                            }
                            c.p += 2;
                            break true;
                        }
                        ch if is_ws(ch) => {
                            c.skip_ws();
                            if matches!(c.peek()?, b'>' | b'/') {
                                continue;
                            }
                            let (name, value) = c.attribute()?;
                            // Duplicates are found by comparing with each earlier attribute:
                            // quadratic, so a tag with more attributes goes to quick-xml,
                            // which hashes them from 32 on.
                            if attrs.len() >= MAX_FAST_ATTRIBUTES || attrs.iter().any(|a| short_eq(a, name)) {
                                return None;
                            }
                            attrs.push(name);
                            let prefix = if name == "xmlns" {
                                ""
                            } else if let Some(p) = name.strip_prefix("xmlns:") {
                                if value.is_empty() {
                                    return None;
                                }
                                p
                            } else {
                                continue;
                            };
                            let ns = if value.is_empty() {
                                Ns::None
                            } else {
                                Ns::from_uri(value, &mut t.others, || Cow::Borrowed(value))
                            };
                            scopes.push((prefix, ns, depth));
                        }
                        _ => return None,
                    }
                };
                let (prefix, local) = qname.split_once(':').unwrap_or(("", qname));
                let ns = match scopes.iter().rev().find(|(p, _, _)| short_eq(p, prefix)) {
                    Some(&(_, ns, _)) => ns,
                    None if prefix.is_empty() => Ns::None,
                    None if prefix == "xml" => Ns::Other(XML_NS),
                    None => return None,
                };
                t.open(limits, ns, Cow::Borrowed(local)).ok()?;
                if empty {
                    while scopes.last().is_some_and(|&(_, _, d)| d >= depth) {
                        scopes.pop();
                    }
                    t.close().ok()?;
                } else {
                    qnames.push(qname);
                }
            }
        }
    }
    t.finish().ok()
}
