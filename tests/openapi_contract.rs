//! The HTTP API is a contract: the OpenAPI document the gateway serves must equal the one
//! committed as `deploy/openapi.json`, so that every change to the API shows in review, and a
//! field that disappeared is named as a breaking change.

use flexgate::commands::openapi::{Differences, document_text};

#[test]
fn the_served_openapi_document_is_the_committed_one() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/openapi.json");
    let text = std::fs::read_to_string(path).expect("deploy/openapi.json is committed");
    let committed: serde_json::Value = serde_json::from_str(&text).expect("deploy/openapi.json is JSON");
    let served = flexgate::grid::http::openapi_document();
    let differences = Differences::between(&committed, &served);
    assert!(differences.is_empty(), "{}", differences.report("deploy/openapi.json"));
    assert_eq!(
        text,
        document_text(&served),
        "deploy/openapi.json is not formatted as `flexgate openapi` prints it"
    );
}
