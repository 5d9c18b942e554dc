//! A small, hardened, namespace-resolved element tree.
//!
//! Elements are identified by (namespace URI, local name); prefixes are never looked at.
//! DOCTYPE, undefined entities, oversized and overly deep documents are rejected.
//!
//! Two parsers build the same tree:
//!
//! - a fast one ([`fast`]) for the documents VTNs actually send: elements, attributes, text, the
//!   five predefined entities, comments and a leading XML declaration. It reads the input, which
//!   is checked to be UTF-8 once, as bytes, and gives up (returns `None`) on anything else: CDATA,
//!   character references, processing instructions, DOCTYPE, unusual spacing in tags, and every
//!   error, limits included;
//! - the reference one ([`reference`]), built on quick-xml, which handles all of XML that we accept
//!   and produces every error.
//!
//! [`parse`] tries the fast parser and falls back to the reference one when it gives up, so every
//! error (and its message) comes from the reference parser: the fast one only has to agree with
//! it on the documents it accepts, which `tests` checks on the fuzz corpus, the fixtures and
//! mutations of them. Why two: quick-xml re-validates UTF-8 for every event and keeps its own copy
//! of each open element's name, which with our tree build made parsing about two thirds of the
//! whole decode of a one-event `oadrDistributeEvent`.
//!
//! The tree is one flat `Vec` of elements linked by first-child/next-sibling indices, so building
//! it allocates a few times per document instead of once per element, and names and (single-chunk)
//! text borrow from the input.

use std::borrow::Cow;

use quick_xml::events::{BytesText, Event as XmlEvent};
use quick_xml::reader::Reader;

use super::{DecodeError, Limits};

/// The namespaces OpenADR 2.0b documents use, matched by URI. `Copy`, so that comparing an
/// element's namespace costs a compare of two small values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ns {
    Oadr,
    Ei,
    Pyld,
    Emix,
    Power,
    Scale,
    Xcal,
    Strm,
    Ds,
    /// No namespace at all.
    None,
    /// Some other namespace URI: an index into the tree's own list of them (see [`Node::ns_uri`]),
    /// or [`XML_NS`] for the `xml` prefix's namespace.
    Other(u32),
}

pub(crate) const NS_OADR: &str = "http://openadr.org/oadr-2.0b/2012/07";
pub(crate) const NS_EI: &str = "http://docs.oasis-open.org/ns/energyinterop/201110";
pub(crate) const NS_PYLD: &str = "http://docs.oasis-open.org/ns/energyinterop/201110/payloads";
pub(crate) const NS_EMIX: &str = "http://docs.oasis-open.org/ns/emix/2011/06";
pub(crate) const NS_POWER: &str = "http://docs.oasis-open.org/ns/emix/2011/06/power";
pub(crate) const NS_SCALE: &str = "http://docs.oasis-open.org/ns/emix/2011/06/siscale";
pub(crate) const NS_XCAL: &str = "urn:ietf:params:xml:ns:icalendar-2.0";
pub(crate) const NS_STRM: &str = "urn:ietf:params:xml:ns:icalendar-2.0:stream";
pub(crate) const NS_DS: &str = "http://www.w3.org/2000/09/xmldsig#";
const NS_XML_URI: &str = "http://www.w3.org/XML/1998/namespace";
/// [`Ns::Other`] of the `xml` prefix, which is bound without a declaration.
const XML_NS: u32 = u32::MAX;

impl Ns {
    /// Classifies a declared URI; an unknown one is kept in `others`.
    fn from_uri<'a>(uri: &str, others: &mut Vec<Cow<'a, str>>, keep: impl FnOnce() -> Cow<'a, str>) -> Ns {
        match uri {
            NS_OADR => Ns::Oadr,
            NS_EI => Ns::Ei,
            NS_PYLD => Ns::Pyld,
            NS_EMIX => Ns::Emix,
            NS_POWER => Ns::Power,
            NS_SCALE => Ns::Scale,
            NS_XCAL => Ns::Xcal,
            NS_STRM => Ns::Strm,
            NS_DS => Ns::Ds,
            _ => {
                // At most one per attribute of the input, so the count fits when the input does;
                // past u32 (a multi-gigabyte document) the URIs are no longer told apart.
                let i = u32::try_from(others.len()).unwrap_or(XML_NS - 1).min(XML_NS - 1);
                others.push(keep());
                Ns::Other(i)
            }
        }
    }
}

/// One element as stored: namespace, local name, concatenated direct text, and links to its
/// first child and next sibling (0: none; the root, at 0, is nobody's child or sibling).
#[derive(Debug, Clone)]
struct Elem<'a> {
    ns: Ns,
    name: Cow<'a, str>,
    text: Cow<'a, str>,
    first_child: u32,
    next_sibling: u32,
}

impl<'a> Elem<'a> {
    /// Appends a text chunk: the first one is borrowed, later ones make the text owned.
    fn push_text(&mut self, chunk: Cow<'a, str>) {
        if self.text.is_empty() {
            self.text = chunk;
        } else if !chunk.is_empty() {
            self.text.to_mut().push_str(&chunk);
        }
    }
}

/// A parsed document: its elements in document order, the root first.
#[derive(Debug, Clone)]
pub(crate) struct Tree<'a> {
    elems: Vec<Elem<'a>>,
    /// URIs of [`Ns::Other`] namespaces.
    others: Vec<Cow<'a, str>>,
}

impl<'a> Tree<'a> {
    pub(crate) fn root(&self) -> Node<'_> {
        Node { tree: self, i: 0 }
    }
}

/// A handle to one element of a [`Tree`]: copied freely, compared by its fields.
#[derive(Clone, Copy)]
pub(crate) struct Node<'t> {
    tree: &'t Tree<'t>,
    i: u32,
}

impl std::fmt::Debug for Node<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("ns", &self.ns_uri())
            .field("name", &self.name())
            .field("text", &self.text())
            .field("children", &self.children().collect::<Vec<_>>())
            .finish()
    }
}

impl<'t> Node<'t> {
    fn elem(self) -> &'t Elem<'t> {
        // Indices are made by `Builder` from positions in this very `Vec`.
        &self.tree.elems[self.i as usize]
    }

    pub(crate) fn ns(self) -> Ns {
        self.elem().ns
    }

    /// The namespace URI (`""` for none).
    pub(crate) fn ns_uri(self) -> &'t str {
        match self.ns() {
            Ns::Oadr => NS_OADR,
            Ns::Ei => NS_EI,
            Ns::Pyld => NS_PYLD,
            Ns::Emix => NS_EMIX,
            Ns::Power => NS_POWER,
            Ns::Scale => NS_SCALE,
            Ns::Xcal => NS_XCAL,
            Ns::Strm => NS_STRM,
            Ns::Ds => NS_DS,
            Ns::None => "",
            Ns::Other(XML_NS) => NS_XML_URI,
            Ns::Other(i) => self.tree.others.get(i as usize).map_or("", |u| u.as_ref()),
        }
    }

    /// The local name.
    pub(crate) fn name(self) -> &'t str {
        &self.elem().name
    }

    /// The element's own text, all chunks concatenated, untrimmed.
    pub(crate) fn text(self) -> &'t str {
        &self.elem().text
    }

    /// Text with surrounding whitespace trimmed.
    pub(crate) fn trimmed(self) -> &'t str {
        self.text().trim()
    }

    pub(crate) fn is(self, ns: Ns, name: &str) -> bool {
        let e = self.elem();
        e.ns == ns && short_eq(&e.name, name)
    }

    pub(crate) fn children(self) -> Children<'t> {
        Children {
            tree: self.tree,
            next: self.elem().first_child,
        }
    }

    /// The first child named `{ns}name`.
    pub(crate) fn child(self, ns: Ns, name: &str) -> Option<Node<'t>> {
        self.children().find(|c| c.is(ns, name))
    }

    /// Every child named `{ns}name`, in order.
    pub(crate) fn all<'n>(self, ns: Ns, name: &'n str) -> All<'t, 'n> {
        All {
            children: self.children(),
            ns,
            name,
        }
    }
}

/// The children of a [`Node`], in document order.
#[derive(Clone)]
pub(crate) struct Children<'t> {
    tree: &'t Tree<'t>,
    next: u32,
}

impl<'t> Iterator for Children<'t> {
    type Item = Node<'t>;

    fn next(&mut self) -> Option<Node<'t>> {
        if self.next == 0 {
            return None;
        }
        let node = Node {
            tree: self.tree,
            i: self.next,
        };
        self.next = node.elem().next_sibling;
        Some(node)
    }
}

/// The children of a [`Node`] with one name, in document order.
#[derive(Clone)]
pub(crate) struct All<'t, 'n> {
    children: Children<'t>,
    ns: Ns,
    name: &'n str,
}

impl<'t> Iterator for All<'t, '_> {
    type Item = Node<'t>;

    fn next(&mut self) -> Option<Node<'t>> {
        let (ns, name) = (self.ns, self.name);
        self.children.find(|c| c.is(ns, name))
    }
}

/// Builds a [`Tree`] from open/text/close steps, enforcing the element count and depth limits.
/// Shared by both parsers, so they build the tree the same way.
struct Builder<'a> {
    elems: Vec<Elem<'a>>,
    others: Vec<Cow<'a, str>>,
    /// Open elements, outermost first: (index, index of its last child so far, 0 if none).
    open: Vec<(u32, u32)>,
}

impl<'a> Builder<'a> {
    fn new(capacity: usize) -> Self {
        Builder {
            elems: Vec::with_capacity(capacity),
            others: Vec::new(),
            open: Vec::with_capacity(16),
        }
    }

    fn depth(&self) -> usize {
        self.open.len()
    }

    /// The root element has been closed (anything but whitespace, comments and PIs after it is
    /// an error).
    fn root_closed(&self) -> bool {
        self.open.is_empty() && !self.elems.is_empty()
    }

    fn open(&mut self, limits: &Limits, ns: Ns, name: Cow<'a, str>) -> Result<(), DecodeError> {
        if self.elems.len() >= limits.max_elements {
            return Err(DecodeError::TooManyElements {
                limit: limits.max_elements,
            });
        }
        if self.open.len() >= limits.max_depth {
            return Err(DecodeError::TooDeep {
                limit: limits.max_depth,
            });
        }
        let i = u32::try_from(self.elems.len()).map_err(|_| DecodeError::TooManyElements {
            limit: limits.max_elements,
        })?;
        self.elems.push(Elem {
            ns,
            name,
            text: Cow::Borrowed(""),
            first_child: 0,
            next_sibling: 0,
        });
        if let Some((parent, last)) = self.open.last_mut() {
            let link = if *last == 0 {
                &mut self.elems[*parent as usize].first_child
            } else {
                &mut self.elems[*last as usize].next_sibling
            };
            *link = i;
            *last = i;
        }
        self.open.push((i, 0));
        Ok(())
    }

    fn close(&mut self) -> Result<(), DecodeError> {
        self.open
            .pop()
            .map(|_| ())
            .ok_or_else(|| xml_err(0, "unmatched end tag"))
    }

    fn push_text(&mut self, text: Cow<'a, str>, pos: u64) -> Result<(), DecodeError> {
        match self.open.last() {
            Some(&(i, _)) => self.elems[i as usize].push_text(text),
            None if text.trim().is_empty() => {}
            None => return Err(xml_err(pos, "text outside the root element")),
        }
        Ok(())
    }

    fn finish(self) -> Result<Tree<'a>, DecodeError> {
        if let Some(&(i, _)) = self.open.last() {
            return Err(DecodeError::Truncated {
                open_element: self.elems[i as usize].name.to_string(),
            });
        }
        if self.elems.is_empty() {
            return Err(DecodeError::Empty);
        }
        Ok(Tree {
            elems: self.elems,
            others: self.others,
        })
    }
}

/// Equality of the short strings compared for every element (prefixes, local names, end tags),
/// as an inlined loop: a call to the C library's `memcmp` for a two-byte prefix cost more than
/// the comparison, and made scope lookups alone about a sixth of a one-event decode.
#[inline(always)]
pub(crate) fn short_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}

const PREDEFINED: [(&str, char); 5] = [("lt", '<'), ("gt", '>'), ("amp", '&'), ("quot", '"'), ("apos", '\'')];

fn xml_err(reader_pos: u64, e: impl std::fmt::Display) -> DecodeError {
    DecodeError::Xml {
        position: reader_pos,
        message: e.to_string(),
    }
}

/// Parses `bytes` into a tree, enforcing `limits`.
pub(crate) fn parse<'a>(bytes: &'a [u8], limits: &Limits) -> Result<Tree<'a>, DecodeError> {
    if bytes.len() > limits.max_bytes {
        return Err(DecodeError::TooLarge {
            size: bytes.len(),
            limit: limits.max_bytes,
        });
    }
    let text = std::str::from_utf8(bytes).map_err(|e| DecodeError::NotUtf8 {
        valid_up_to: e.valid_up_to(),
    })?;
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    match fast::parse(text, limits) {
        Some(tree) => Ok(tree),
        None => reference::parse(text, limits),
    }
}

/// The quick-xml parser: all of the XML we accept, and every error.
pub(super) mod reference {
    use super::*;

    /// Checks an attribute's raw value: only predefined entities and character references.
    fn check_attr_entities(raw: &[u8]) -> Result<(), DecodeError> {
        let mut rest = raw;
        while let Some(amp) = rest.iter().position(|&b| b == b'&') {
            let after = &rest[amp + 1..];
            let Some(semi) = after.iter().position(|&b| b == b';') else {
                return Err(DecodeError::Entity {
                    name: String::from_utf8_lossy(after).into_owned(),
                });
            };
            let name = &after[..semi];
            let ok = name.first() == Some(&b'#') || PREDEFINED.iter().any(|(n, _)| n.as_bytes() == name);
            if !ok {
                return Err(DecodeError::Entity {
                    name: String::from_utf8_lossy(name).into_owned(),
                });
            }
            rest = &after[semi + 1..];
        }
        Ok(())
    }

    /// In-scope namespace declarations: (prefix, namespace, depth of the declaring element). The
    /// default namespace has the prefix `""`. Each URI is classified once, when it is declared,
    /// so resolving an element costs a short scan of prefixes, not a comparison of URIs.
    #[derive(Default)]
    struct Scopes<'a> {
        bindings: Vec<(Cow<'a, str>, Ns, usize)>,
    }

    impl Scopes<'_> {
        fn resolve(&self, prefix: &str) -> Result<Ns, DecodeError> {
            match self.bindings.iter().rev().find(|(p, _, _)| p == prefix) {
                Some((_, ns, _)) => Ok(*ns),
                None if prefix.is_empty() => Ok(Ns::None),
                None if prefix == "xml" => Ok(Ns::Other(XML_NS)),
                None => Err(DecodeError::UnknownPrefix {
                    prefix: prefix.to_string(),
                }),
            }
        }

        /// Forgets the declarations of the element at `depth` (it just closed).
        fn close(&mut self, depth: usize) {
            while self.bindings.last().is_some_and(|(_, _, d)| *d >= depth) {
                self.bindings.pop();
            }
        }
    }

    /// Reads the start tag's attributes once: checks entities in values and records namespace
    /// declarations. Returns the element's namespace and local name.
    fn start_tag<'a>(
        e: &quick_xml::events::BytesStart<'a>,
        doc: &'a str,
        depth: usize,
        scopes: &mut Scopes<'a>,
        others: &mut Vec<Cow<'a, str>>,
        pos: u64,
    ) -> Result<(Ns, Cow<'a, str>), DecodeError> {
        for attr in e.attributes() {
            let attr = attr.map_err(|err| xml_err(pos, err))?;
            let value = attr.value;
            if value.contains('&') {
                check_attr_entities(value.as_bytes())?;
            }
            let key = attr.key.as_ref();
            let prefix = if key == "xmlns" {
                ""
            } else if let Some(p) = key.strip_prefix("xmlns:") {
                if value.is_empty() {
                    return Err(xml_err(pos, format!("namespace prefix {p:?} is bound to an empty URI")));
                }
                p
            } else {
                continue;
            };
            let ns = if value.is_empty() {
                Ns::None
            } else {
                Ns::from_uri(&value, others, || Cow::Owned(value.to_string()))
            };
            scopes.bindings.push((Cow::Owned(prefix.to_string()), ns, depth));
        }
        let qname = e.name();
        let full = qname.as_ref();
        let (prefix, _) = full.split_once(':').unwrap_or(("", full));
        let ns = scopes.resolve(prefix)?;
        Ok((ns, local_name(e, doc)))
    }

    /// The element's local name, borrowed from the document when quick-xml's event borrows from
    /// it (always, for start tags read from a `&str`), copied otherwise.
    fn local_name<'a>(e: &quick_xml::events::BytesStart<'a>, doc: &'a str) -> Cow<'a, str> {
        let name = e.local_name().into_inner();
        let start = name.as_ptr() as usize;
        let base = doc.as_ptr() as usize;
        match doc.get(start.wrapping_sub(base)..start.wrapping_sub(base).wrapping_add(name.len())) {
            Some(slice) if start >= base && std::ptr::eq(slice.as_ptr(), name.as_ptr()) => Cow::Borrowed(slice),
            _ => Cow::Owned(name.to_string()),
        }
    }

    /// Parses `text` (UTF-8 already checked, BOM removed) into a tree, enforcing `limits`.
    pub(in crate::oadr2b) fn parse<'a>(text: &'a str, limits: &Limits) -> Result<Tree<'a>, DecodeError> {
        let mut reader = Reader::from_str(text);
        reader.config_mut().check_end_names = true;
        reader.config_mut().expand_empty_elements = false;
        let mut b = Builder::new(0);
        let mut scopes = Scopes::default();
        loop {
            let pos = reader.buffer_position();
            let ev = reader.read_event().map_err(|e| xml_err(pos, e))?;
            match ev {
                XmlEvent::Start(e) => {
                    if b.root_closed() {
                        return Err(xml_err(pos, "more than one root element"));
                    }
                    let (ns, name) = start_tag(&e, text, b.depth(), &mut scopes, &mut b.others, pos)?;
                    b.open(limits, ns, name)?;
                }
                XmlEvent::Empty(e) => {
                    if b.root_closed() {
                        return Err(xml_err(pos, "more than one root element"));
                    }
                    let (ns, name) = start_tag(&e, text, b.depth(), &mut scopes, &mut b.others, pos)?;
                    b.open(limits, ns, name)?;
                    scopes.close(b.depth() - 1);
                    b.close()?;
                }
                XmlEvent::End(_) => {
                    scopes.close(b.depth().saturating_sub(1));
                    b.close()?
                }
                XmlEvent::Text(t) => b.push_text(t.xml10_content(), pos)?,
                XmlEvent::CData(t) => {
                    if b.depth() == 0 {
                        return Err(xml_err(pos, "CDATA outside the root element"));
                    }
                    b.push_text(t.xml10_content(), pos)?
                }
                XmlEvent::GeneralRef(r) => {
                    let ch = if r.is_char_ref() {
                        match r.resolve_char_ref() {
                            Ok(Some(c)) => c,
                            _ => {
                                return Err(DecodeError::Entity {
                                    name: r.xml10_content().into_owned(),
                                });
                            }
                        }
                    } else {
                        let name = r.xml10_content();
                        match PREDEFINED.iter().find(|(n, _)| *n == name) {
                            Some((_, c)) => *c,
                            None => {
                                return Err(DecodeError::Entity {
                                    name: name.into_owned(),
                                });
                            }
                        }
                    };
                    if b.depth() == 0 {
                        return Err(xml_err(pos, "reference outside the root element"));
                    }
                    b.push_text(Cow::Owned(ch.to_string()), pos)?;
                }
                XmlEvent::DocType(_) => return Err(DecodeError::Doctype),
                XmlEvent::Decl(d) => {
                    if let Some(enc) = d.encoding() {
                        let enc = enc.map_err(|e| xml_err(pos, e))?;
                        if !enc.eq_ignore_ascii_case("utf-8") && !enc.eq_ignore_ascii_case("utf8") {
                            return Err(DecodeError::UnsupportedEncoding(enc.into_owned()));
                        }
                    }
                }
                XmlEvent::Comment(_) | XmlEvent::PI(_) => {}
                XmlEvent::Eof => break,
            }
        }
        b.finish()
    }
}

/// The fast parser: the common subset of XML, read as bytes; `None` means "ask the reference
/// parser" (see the module documentation for what is left to it).
pub(super) mod fast {
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
}

#[cfg(test)]
mod tests {
    //! The fast parser against the reference one: whatever the fast one accepts, the reference
    //! one must accept too, with the same tree.

    use super::*;

    fn same(a: Node<'_>, b: Node<'_>) -> bool {
        a.ns_uri() == b.ns_uri()
            && a.name() == b.name()
            && a.text() == b.text()
            && a.children().count() == b.children().count()
            && a.children().zip(b.children()).all(|(x, y)| same(x, y))
    }

    /// Checks one document; returns whether the fast parser took it.
    fn check(doc: &[u8], limits: &Limits) -> bool {
        let Ok(text) = std::str::from_utf8(doc) else {
            return false;
        };
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let Some(fast) = fast::parse(text, limits) else {
            return false;
        };
        match reference::parse(text, limits) {
            Ok(reference) => assert!(
                same(fast.root(), reference.root()),
                "trees differ for {text:?}:\nfast {:?}\nreference {:?}",
                fast.root(),
                reference.root()
            ),
            Err(e) => panic!("the fast parser accepted what the reference refuses ({e}): {text:?}"),
        }
        true
    }

    /// Wrappers like those of the fuzz target (`fuzz/fuzz_targets/decode_2b.rs`).
    const PAYLOAD_OPEN: &str = concat!(
        r#"<oadr:oadrPayload xmlns:oadr="http://openadr.org/oadr-2.0b/2012/07""#,
        r#" xmlns:ei="http://docs.oasis-open.org/ns/energyinterop/201110""#,
        r#" xmlns:pyld="http://docs.oasis-open.org/ns/energyinterop/201110/payloads""#,
        r#" xmlns:emix="http://docs.oasis-open.org/ns/emix/2011/06""#,
        r#" xmlns:power="http://docs.oasis-open.org/ns/emix/2011/06/power""#,
        r#" xmlns:scale="http://docs.oasis-open.org/ns/emix/2011/06/siscale""#,
        r#" xmlns:xcal="urn:ietf:params:xml:ns:icalendar-2.0""#,
        r#" xmlns:strm="urn:ietf:params:xml:ns:icalendar-2.0:stream""#,
        r#" xmlns:ds="http://www.w3.org/2000/09/xmldsig#">"#,
        r#"<oadr:oadrSignedObject>"#,
    );
    const PAYLOAD_CLOSE: &str = "</oadr:oadrSignedObject></oadr:oadrPayload>";
    const EVENT_OPEN: &str = concat!(
        r#"<oadr:oadrDistributeEvent ei:schemaVersion="2.0b"><pyld:requestID>R</pyld:requestID>"#,
        r#"<ei:vtnID>V</ei:vtnID><oadr:oadrEvent><ei:eiEvent>"#,
    );
    const EVENT_CLOSE: &str = "</ei:eiEvent></oadr:oadrEvent></oadr:oadrDistributeEvent>";

    /// The documents in `dir`: relative to the crate, or absolute (the `OADR2B_EXTRA_CORPUS`
    /// directory: set it to a fresh fuzzing corpus to compare the parsers on that too).
    fn files(dir: &str) -> Vec<Vec<u8>> {
        let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(dir);
        let mut paths: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.is_file())
            .collect();
        paths.sort();
        paths.into_iter().map(|p| std::fs::read(p).unwrap()).collect()
    }

    /// What mutations insert: markup the fast parser handles, markup it leaves to the reference
    /// parser, and broken markup.
    const SNIPPETS: [&str; 30] = [
        "<!-- c -->",
        "<!---->",
        "<!--->-->",
        "<!-- a -- b -->",
        "<!--",
        "\r\n",
        "\r",
        "&amp;",
        "&lt;&gt;&quot;&apos;",
        "&#65;",
        "&nbsp;",
        "&",
        "<![CDATA[x]]>",
        " xmlns=\"\"",
        " xmlns:ei=\"urn:x\"",
        " xmlns:=\"urn:x\"",
        " xmlns:q=\"\"",
        "<?pi x?>",
        "<x/>",
        "<ei:x a='1' b=\"2\" />",
        "</x>",
        " a=\"1\"",
        " a=\"1\" a=\"2\"",
        " a = \"1\"",
        " a=\"x>y\"",
        "  ",
        ":",
        "<ei:x>1</ei:x >",
        "<xml:x/>",
        "\u{e9}",
    ];

    #[test]
    fn many_attributes_go_to_the_reference_parser() {
        let tag = |n: usize| {
            let attrs: String = (0..n).map(|i| format!(" a{i}=\"{i}\"")).collect();
            format!("<x{attrs}/>")
        };
        let limits = Limits::default();
        assert!(check(tag(32).as_bytes(), &limits));
        let many = tag(20_000);
        assert!(fast::parse(&many, &limits).is_none());
        assert!(reference::parse(&many, &limits).is_ok());
        let dup = format!("<x{} a7=\"again\"/>", &tag(40)[2..tag(40).len() - 2]);
        assert!(fast::parse(&dup, &limits).is_none());
        assert!(matches!(parse(dup.as_bytes(), &limits), Err(DecodeError::Xml { .. })));
    }

    #[test]
    fn the_fast_parser_agrees_with_the_reference_one() {
        let limits = Limits::default();
        let mut docs = files("fuzz/corpus/decode_2b");
        docs.extend(files("fuzz/seeds"));
        if let Some(extra) = std::env::var_os("OADR2B_EXTRA_CORPUS") {
            docs.extend(files(&extra.to_string_lossy()));
        }
        let fixtures: Vec<Vec<u8>> = files("tests/fixtures")
            .into_iter()
            .chain(files("benches/inputs"))
            .filter(|d| d.trim_ascii_start().starts_with(b"<"))
            .collect();
        for f in &fixtures {
            assert!(check(f, &limits), "the fast parser must take every fixture");
        }
        let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
        let mut rnd = move |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        };
        let (mut taken, mut total) = (0usize, 0usize);
        // Every document alone and, as the fuzz target does, wrapped in a payload that declares
        // every prefix and in an otherwise valid event, so that fragments reach the parser whole.
        for doc in docs.iter().chain(&fixtures) {
            total += 1;
            taken += usize::from(check(doc, &limits));
            if let Ok(s) = std::str::from_utf8(doc) {
                for wrapped in [
                    format!("{PAYLOAD_OPEN}{s}{PAYLOAD_CLOSE}"),
                    format!("{PAYLOAD_OPEN}{EVENT_OPEN}{s}{EVENT_CLOSE}{PAYLOAD_CLOSE}"),
                ] {
                    total += 1;
                    taken += usize::from(check(wrapped.as_bytes(), &limits));
                }
            }
        }
        for doc in &fixtures {
            for _ in 0..300 {
                let mut d = doc.clone();
                let at = rnd(d.len());
                match rnd(5) {
                    0 => d[at] = b"<>/&;:\"' x0-=\r\n?!#"[rnd(18)],
                    1 => {
                        let end = (at + rnd(40)).min(d.len());
                        d.drain(at..end);
                    }
                    2 => {
                        let s = SNIPPETS[rnd(SNIPPETS.len())];
                        d.splice(at..at, s.bytes());
                    }
                    3 => {
                        // After a tag, or inside one before its `>`, where markup stays well-formed.
                        if let Some(gt) = d[at..].iter().position(|&b| b == b'>') {
                            let s = SNIPPETS[rnd(SNIPPETS.len())];
                            let at = at + gt + rnd(2);
                            d.splice(at..at, s.bytes());
                        }
                    }
                    _ => {
                        let end = (at + rnd(200)).min(d.len());
                        let chunk = d[at..end].to_vec();
                        d.splice(at..at, chunk);
                    }
                }
                total += 1;
                taken += usize::from(check(&d, &limits));
            }
        }
        // Tight limits: the fast parser must give up where the reference one refuses.
        let tight = Limits {
            max_depth: 6,
            max_elements: 40,
            ..Limits::default()
        };
        for doc in &fixtures {
            check(doc, &tight);
        }
        eprintln!("the fast parser took {taken} of {total} documents");
        // The comparison means something only if the fast parser took many (most corpus files
        // are hostile and go to the reference parser).
        assert!(taken > 1_000, "the fast parser took only {taken} of {total}");
    }
}
