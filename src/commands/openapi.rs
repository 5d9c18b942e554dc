//! `flexgate openapi`: the HTTP API's OpenAPI document, and the check that keeps the committed
//! copy (`deploy/openapi.json`) equal to what the gateway serves.

use super::read_input;
use anyhow::{Result, bail};
use clap::Args;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Print the OpenAPI document the gateway serves at `GET /openapi.json`, or check a copy of it.
///
/// The API under `/v1` is a contract with other people's code: fields are added, never renamed
/// or removed without a new version. The document is committed as `deploy/openapi.json`, and a
/// test fails when the served one differs, so every change to the API shows in review; a field
/// that disappeared is reported as a breaking change.
///
/// Examples:
///   flexgate openapi > deploy/openapi.json        # after a reviewed, additive change
///   flexgate openapi --check deploy/openapi.json  # exit 1 and the differences when they differ
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub struct OpenApiArgs {
    /// Compare with this copy instead of printing: list what was added, removed or changed.
    #[arg(long, value_name = "FILE.json")]
    check: Option<PathBuf>,
}

/// Run `flexgate openapi`.
pub fn run(args: &OpenApiArgs) -> Result<()> {
    let served = crate::grid::http::openapi_document();
    let Some(path) = &args.check else {
        crate::out!("{}", document_text(&served));
        return Ok(());
    };
    let committed: Value =
        serde_json::from_str(&read_input(path)?).map_err(|e| anyhow::anyhow!("{} is not JSON: {e}", path.display()))?;
    let differences = Differences::between(&committed, &served);
    if differences.is_empty() {
        crate::outln!("{} is the document the gateway serves", path.display());
        return Ok(());
    }
    crate::out!("{}", differences.report(&path.display().to_string()));
    bail!("{} differs from the served document", path.display())
}

/// The document as committed: pretty JSON with a final newline.
#[must_use]
pub fn document_text(document: &Value) -> String {
    let mut text = serde_json::to_string_pretty(document).unwrap_or_default();
    text.push('\n');
    text
}

/// How a committed copy of the document differs from the served one, leaf by leaf (JSON
/// pointers; an array's items by index).
#[derive(Debug, Default, PartialEq)]
pub struct Differences {
    /// In the served document only: additions (review, then regenerate the copy).
    pub added: Vec<String>,
    /// In the copy only: removals or renames, breaking for clients of `/v1`.
    pub removed: Vec<String>,
    /// In both, with another value.
    pub changed: Vec<String>,
}

impl Differences {
    /// Compare `committed` with `served`.
    #[must_use]
    pub fn between(committed: &Value, served: &Value) -> Self {
        let (mut old, mut new) = (BTreeMap::new(), BTreeMap::new());
        leaves(committed, String::new(), &mut old);
        leaves(served, String::new(), &mut new);
        let mut differences = Self::default();
        for (pointer, value) in &old {
            match new.get(pointer) {
                None => differences.removed.push(pointer.clone()),
                Some(v) if v != value => differences.changed.push(pointer.clone()),
                Some(_) => {}
            }
        }
        differences.added = new.keys().filter(|p| !old.contains_key(*p)).cloned().collect();
        differences
    }

    /// Whether the two are the same document.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty() && self.changed.is_empty()
    }

    /// The differences in words, at most [`REPORT_LINES`] pointers of each kind.
    #[must_use]
    pub fn report(&self, copy: &str) -> String {
        let mut text = String::new();
        let mut section = |title: &str, pointers: &[String]| {
            if pointers.is_empty() {
                return;
            }
            text.push_str(&format!("{title} ({}):\n", pointers.len()));
            for p in pointers.iter().take(REPORT_LINES) {
                text.push_str(&format!("  {p}\n"));
            }
            if pointers.len() > REPORT_LINES {
                text.push_str(&format!("  … and {} more\n", pointers.len() - REPORT_LINES));
            }
        };
        section(
            "removed from the served document: a breaking change for clients under /v1; keep the field, or add a new version and a migration path",
            &self.removed,
        );
        section("changed", &self.changed);
        section("added (review, then `flexgate openapi > FILE`)", &self.added);
        text.push_str(&format!(
            "{copy} must equal `flexgate openapi`: regenerate it once the change is reviewed\n"
        ));
        text
    }
}

/// Pointers listed per kind in a report.
pub const REPORT_LINES: usize = 20;

/// Every leaf of `value` (and every empty object or array) under its JSON pointer.
fn leaves(value: &Value, pointer: String, into: &mut BTreeMap<String, Value>) {
    let escape = |key: &str| key.replace('~', "~0").replace('/', "~1");
    match value {
        Value::Object(map) if !map.is_empty() => {
            for (k, v) in map {
                leaves(v, format!("{pointer}/{}", escape(k)), into);
            }
        }
        Value::Array(items) if !items.is_empty() => {
            for (i, v) in items.iter().enumerate() {
                leaves(v, format!("{pointer}/{i}"), into);
            }
        }
        other => {
            into.insert(pointer, other.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Differences;
    use serde_json::json;

    #[test]
    fn a_renamed_field_is_a_removal_and_an_addition_and_the_report_says_it_breaks_clients() {
        let committed =
            json!({"components": {"schemas": {"Plan": {"properties": {"shortfall_kw": {"type": "number"}}}}}});
        let served = json!({"components": {"schemas": {"Plan": {"properties": {"shortfall_w": {"type": "number"}}}}}});
        let d = Differences::between(&committed, &served);
        assert_eq!(d.removed, ["/components/schemas/Plan/properties/shortfall_kw/type"]);
        assert_eq!(d.added, ["/components/schemas/Plan/properties/shortfall_w/type"]);
        assert!(d.changed.is_empty());
        let report = d.report("deploy/openapi.json");
        assert!(
            report.contains("breaking change") && report.contains("shortfall_kw"),
            "{report}"
        );
        assert!(Differences::between(&served, &served).is_empty());
    }

    #[test]
    fn a_changed_value_and_escaped_keys_are_reported_by_pointer() {
        let committed = json!({"paths": {"/v1/plan": {"get": {"summary": "old"}}}});
        let served = json!({"paths": {"/v1/plan": {"get": {"summary": "new"}}}});
        let d = Differences::between(&committed, &served);
        assert_eq!(d.changed, ["/paths/~1v1~1plan/get/summary"]);
        assert!(d.added.is_empty() && d.removed.is_empty());
    }
}
