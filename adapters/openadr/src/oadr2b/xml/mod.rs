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

pub(super) mod fast;
pub(super) mod reference;

#[cfg(test)]
mod tests;
