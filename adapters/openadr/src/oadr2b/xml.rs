//! A small, hardened, namespace-resolved element tree built from quick-xml's `NsReader`.
//!
//! Elements are identified by (namespace URI, local name); prefixes are never looked at.
//! DOCTYPE, undefined entities, oversized and overly deep documents are rejected.

use quick_xml::events::Event as XmlEvent;
use quick_xml::name::ResolveResult;
use quick_xml::reader::NsReader;

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
#[derive(Debug, Clone)]
pub(crate) struct Node {
    pub ns: Ns,
    pub name: String,
    pub text: String,
    pub children: Vec<Node>,
}

impl Node {
    pub(crate) fn is(&self, ns: &Ns, name: &str) -> bool {
        &self.ns == ns && self.name == name
    }

    pub(crate) fn child(&self, ns: &Ns, name: &str) -> Option<&Node> {
        self.children.iter().find(|c| c.is(ns, name))
    }

    pub(crate) fn all<'a>(&'a self, ns: &'a Ns, name: &'a str) -> impl Iterator<Item = &'a Node> + 'a {
        self.children.iter().filter(move |c| c.is(ns, name))
    }

    /// Text with surrounding whitespace trimmed.
    pub(crate) fn trimmed(&self) -> &str {
        self.text.trim()
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

fn resolve(res: ResolveResult<'_>) -> Result<Ns, DecodeError> {
    match res {
        ResolveResult::Bound(ns) => Ok(Ns::from_uri(ns.into_inner())),
        ResolveResult::Unbound => Ok(Ns::None),
        ResolveResult::Unknown(prefix) => Err(DecodeError::UnknownPrefix { prefix }),
    }
}

fn open(
    stack: &mut Vec<Node>,
    count: &mut usize,
    limits: &Limits,
    ns: Ns,
    e: &quick_xml::events::BytesStart<'_>,
    pos: u64,
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
    for attr in e.attributes() {
        let attr = attr.map_err(|err| xml_err(pos, err))?;
        check_attr_entities(attr.value.as_bytes())?;
    }
    let name = e.local_name().into_inner().to_owned();
    stack.push(Node {
        ns,
        name,
        text: String::new(),
        children: Vec::new(),
    });
    Ok(())
}

fn close(stack: &mut Vec<Node>, root: &mut Option<Node>) -> Result<(), DecodeError> {
    let node = stack.pop().ok_or_else(|| xml_err(0, "unmatched end tag"))?;
    match stack.last_mut() {
        Some(parent) => parent.children.push(node),
        None => *root = Some(node),
    }
    Ok(())
}

fn push_text(stack: &mut [Node], text: &str, pos: u64) -> Result<(), DecodeError> {
    match stack.last_mut() {
        Some(node) => node.text.push_str(text),
        None if text.trim().is_empty() => {}
        None => return Err(xml_err(pos, "text outside the root element")),
    }
    Ok(())
}

/// Parses `bytes` into a tree, enforcing `limits`.
pub(crate) fn parse(bytes: &[u8], limits: &Limits) -> Result<Node, DecodeError> {
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
    let mut reader = NsReader::from_str(text);
    reader.config_mut().check_end_names = true;
    reader.config_mut().expand_empty_elements = false;
    let mut stack: Vec<Node> = Vec::new();
    let mut root: Option<Node> = None;
    let mut count = 0usize;
    loop {
        let pos = reader.buffer_position();
        let (res, ev) = reader.read_resolved_event().map_err(|e| xml_err(pos, e))?;
        match ev {
            XmlEvent::Start(e) => {
                if root.is_some() {
                    return Err(xml_err(pos, "more than one root element"));
                }
                let ns = resolve(res)?;
                open(&mut stack, &mut count, limits, ns, &e, pos)?;
            }
            XmlEvent::Empty(e) => {
                if root.is_some() {
                    return Err(xml_err(pos, "more than one root element"));
                }
                let ns = resolve(res)?;
                open(&mut stack, &mut count, limits, ns, &e, pos)?;
                close(&mut stack, &mut root)?;
            }
            XmlEvent::End(_) => close(&mut stack, &mut root)?,
            XmlEvent::Text(t) => push_text(&mut stack, &t.xml10_content(), pos)?,
            XmlEvent::CData(t) => {
                if stack.is_empty() {
                    return Err(xml_err(pos, "CDATA outside the root element"));
                }
                push_text(&mut stack, &t.xml10_content(), pos)?
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
                let mut buf = [0u8; 4];
                push_text(&mut stack, ch.encode_utf8(&mut buf), pos)?;
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
            open_element: open.name.clone(),
        });
    }
    root.ok_or(DecodeError::Empty)
}
