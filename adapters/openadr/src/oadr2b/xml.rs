//! A small, hardened, namespace-resolved element tree built from quick-xml's `NsReader`.
//!
//! Elements are identified by (namespace URI, local name); prefixes are never looked at.
//! DOCTYPE, undefined entities, oversized and overly deep documents are rejected.

use std::borrow::Cow;

use quick_xml::events::Event as XmlEvent;
use quick_xml::reader::Reader;

use super::{DecodeError, Limits};

/// The namespaces OpenADR 2.0b documents use, matched by URI.
#[derive(Debug, Clone, PartialEq, Eq)]
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
    /// Some other namespace URI.
    Other(String),
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

impl Ns {
    fn from_uri(uri: &str) -> Ns {
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
            other => Ns::Other(other.to_owned()),
        }
    }

    pub(crate) fn uri(&self) -> &str {
        match self {
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
            Ns::Other(s) => s,
        }
    }
}

/// One element: namespace, local name, concatenated direct text, child elements.
///
/// Names and (single-chunk) text borrow from the input: decoding allocates per element only
/// for its list of children, which is what keeps it fast on large distributes.
#[derive(Debug, Clone)]
pub(crate) struct Node<'a> {
    pub ns: Ns,
    pub name: Cow<'a, str>,
    pub text: Cow<'a, str>,
    pub children: Vec<Node<'a>>,
}

impl<'a> Node<'a> {
    pub(crate) fn is(&self, ns: &Ns, name: &str) -> bool {
        &self.ns == ns && self.name == name
    }

    pub(crate) fn child(&self, ns: &Ns, name: &str) -> Option<&Node<'a>> {
        self.children.iter().find(|c| c.is(ns, name))
    }

    pub(crate) fn all<'s>(&'s self, ns: &'s Ns, name: &'s str) -> impl Iterator<Item = &'s Node<'a>> + 's {
        self.children.iter().filter(move |c| c.is(ns, name))
    }

    /// Text with surrounding whitespace trimmed.
    pub(crate) fn trimmed(&self) -> &str {
        self.text.trim()
    }

    /// Appends a text chunk: the first one is borrowed, later ones make the text owned.
    fn push_text(&mut self, chunk: Cow<'a, str>) {
        if self.text.is_empty() {
            self.text = chunk;
        } else if !chunk.is_empty() {
            self.text.to_mut().push_str(&chunk);
        }
    }
}

const PREDEFINED: [(&str, char); 5] = [("lt", '<'), ("gt", '>'), ("amp", '&'), ("quot", '"'), ("apos", '\'')];

fn xml_err(reader_pos: u64, e: impl std::fmt::Display) -> DecodeError {
    DecodeError::Xml {
        position: reader_pos,
        message: e.to_string(),
    }
}

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
/// default namespace has the prefix `""`. Each URI is classified once, when it is declared, so
/// resolving an element costs a short scan of prefixes, not a comparison of URIs.
#[derive(Default)]
struct Scopes<'a> {
    bindings: Vec<(Cow<'a, str>, Ns, usize)>,
}

impl<'a> Scopes<'a> {
    fn resolve(&self, prefix: &str) -> Result<Ns, DecodeError> {
        match self.bindings.iter().rev().find(|(p, _, _)| p == prefix) {
            Some((_, ns, _)) => Ok(ns.clone()),
            None if prefix.is_empty() => Ok(Ns::None),
            None if prefix == "xml" => Ok(Ns::Other("http://www.w3.org/XML/1998/namespace".into())),
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
            Ns::from_uri(&value)
        };
        scopes.bindings.push((Cow::Owned(prefix.to_string()), ns, depth));
    }
    let qname = e.name();
    let full = qname.as_ref();
    let (prefix, _) = full.split_once(':').unwrap_or(("", full));
    let ns = scopes.resolve(prefix)?;
    Ok((ns, local_name(e, doc)))
}

fn open<'a>(
    stack: &mut Vec<Node<'a>>,
    count: &mut usize,
    limits: &Limits,
    ns: Ns,
    name: Cow<'a, str>,
) -> Result<(), DecodeError> {
    *count += 1;
    if *count > limits.max_elements {
        return Err(DecodeError::TooManyElements {
            limit: limits.max_elements,
        });
    }
    if stack.len() >= limits.max_depth {
        return Err(DecodeError::TooDeep {
            limit: limits.max_depth,
        });
    }
    stack.push(Node {
        ns,
        name,
        text: Cow::Borrowed(""),
        children: Vec::new(),
    });
    Ok(())
}

fn close<'a>(stack: &mut Vec<Node<'a>>, root: &mut Option<Node<'a>>) -> Result<(), DecodeError> {
    let node = stack.pop().ok_or_else(|| xml_err(0, "unmatched end tag"))?;
    match stack.last_mut() {
        Some(parent) => parent.children.push(node),
        None => *root = Some(node),
    }
    Ok(())
}

fn push_text<'a>(stack: &mut [Node<'a>], text: Cow<'a, str>, pos: u64) -> Result<(), DecodeError> {
    match stack.last_mut() {
        Some(node) => node.push_text(text),
        None if text.trim().is_empty() => {}
        None => return Err(xml_err(pos, "text outside the root element")),
    }
    Ok(())
}

/// The element's local name, borrowed from the document when quick-xml's event borrows from it
/// (always, for start tags read from a `&str`), copied otherwise.
fn local_name<'a>(e: &quick_xml::events::BytesStart<'a>, doc: &'a str) -> Cow<'a, str> {
    let name = e.local_name().into_inner();
    let start = name.as_ptr() as usize;
    let base = doc.as_ptr() as usize;
    match doc.get(start.wrapping_sub(base)..start.wrapping_sub(base).wrapping_add(name.len())) {
        Some(slice) if start >= base && std::ptr::eq(slice.as_ptr(), name.as_ptr()) => Cow::Borrowed(slice),
        _ => Cow::Owned(name.to_string()),
    }
}

/// Parses `bytes` into a tree, enforcing `limits`.
pub(crate) fn parse<'a>(bytes: &'a [u8], limits: &Limits) -> Result<Node<'a>, DecodeError> {
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
    let mut reader = Reader::from_str(text);
    reader.config_mut().check_end_names = true;
    reader.config_mut().expand_empty_elements = false;
    let mut stack: Vec<Node<'a>> = Vec::new();
    let mut root: Option<Node<'a>> = None;
    let mut count = 0usize;
    let mut scopes = Scopes::default();
    loop {
        let pos = reader.buffer_position();
        let ev = reader.read_event().map_err(|e| xml_err(pos, e))?;
        match ev {
            XmlEvent::Start(e) => {
                if root.is_some() {
                    return Err(xml_err(pos, "more than one root element"));
                }
                let (ns, name) = start_tag(&e, text, stack.len(), &mut scopes, pos)?;
                open(&mut stack, &mut count, limits, ns, name)?;
            }
            XmlEvent::Empty(e) => {
                if root.is_some() {
                    return Err(xml_err(pos, "more than one root element"));
                }
                let (ns, name) = start_tag(&e, text, stack.len(), &mut scopes, pos)?;
                open(&mut stack, &mut count, limits, ns, name)?;
                scopes.close(stack.len() - 1);
                close(&mut stack, &mut root)?;
            }
            XmlEvent::End(_) => {
                scopes.close(stack.len().saturating_sub(1));
                close(&mut stack, &mut root)?
            }
            XmlEvent::Text(t) => push_text(&mut stack, t.xml10_content(), pos)?,
            XmlEvent::CData(t) => {
                if stack.is_empty() {
                    return Err(xml_err(pos, "CDATA outside the root element"));
                }
                push_text(&mut stack, t.xml10_content(), pos)?
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
                if stack.is_empty() {
                    return Err(xml_err(pos, "reference outside the root element"));
                }
                push_text(&mut stack, Cow::Owned(ch.to_string()), pos)?;
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
    if let Some(open) = stack.last() {
        return Err(DecodeError::Truncated {
            open_element: open.name.to_string(),
        });
    }
    root.ok_or(DecodeError::Empty)
}
