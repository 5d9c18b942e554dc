//! The ledger's hash chain and the MQTT event signatures both hash RFC 8785 canonical JSON
//! through the one implementation in `flexgate-jcs` (the ledger with exact integers, the
//! signatures refusing integers beyond 2^53, after their own strict parse). An auditor checking
//! a signed event against its ledger record needs both entry points to produce the same bytes:
//! for every value the signatures accept, from the value and from its text, they must.

use proptest::prelude::*;
use serde_json::{Map, Number, Value};

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-(1i64 << 53)..=(1i64 << 53)).prop_map(|i| Value::Number(i.into())),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| Number::from_f64(f).map_or(Value::Null, Value::Number)),
        // Control characters, quotes, backslashes, non-BMP characters and plain text.
        "[\\x00-\\x1f\"\\\\/a-zé€😀\u{2028}]{0,12}".prop_map(Value::String),
    ]
}

fn value() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec(("[a-zA-Z_é😀\\x00-\\x05]{0,6}", inner), 0..6)
                .prop_map(|members| Value::Object(members.into_iter().collect::<Map<String, Value>>())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2_000, .. ProptestConfig::default() })]

    #[test]
    fn the_ledger_and_the_mqtt_signatures_canonicalise_alike(v in value()) {
        let ledger = flexgate::ledger::canonical_json(&v);
        let signatures = flexgate_mqtt::signature::canonical_json(&v).expect("within ±2^53");
        prop_assert_eq!(ledger.as_bytes(), signatures.as_slice());
        // The signature check reads the document's text through its strict parser.
        if v.is_object() && v.get("sig").is_none() {
            let text = v.to_string();
            let from_text = flexgate_mqtt::signature::canonical_without_sig(text.as_bytes()).expect("a valid document");
            prop_assert_eq!(ledger.as_bytes(), from_text.as_slice());
        }
    }
}

#[test]
fn rfc_8785_examples_agree() {
    for text in [
        r#"{"b":[1,2e-3,1e21,-0.0,4.50],"a":{"z":"\u0008\u001f/é","é":null,"10":true,"1":false}}"#,
        r#"{"€":1,"\r":2,"😀":3,"ö":4,"1":5,"\u0080":6}"#,
        r#"[0.1,100,1e-7,123456789012345680000,5e-324]"#,
    ] {
        let v: Value = serde_json::from_str(text).expect("json");
        let ledger = flexgate::ledger::canonical_json(&v);
        let signatures = flexgate_mqtt::signature::canonical_json(&v).expect("canonical");
        assert_eq!(ledger.as_bytes(), signatures.as_slice(), "{text}");
    }
}
