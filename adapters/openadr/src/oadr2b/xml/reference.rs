//! The quick-xml parser: all of the XML we accept, and every error.

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
