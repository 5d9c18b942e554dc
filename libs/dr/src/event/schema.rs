//! The JSON Schema (draft 2020-12) of `dr.event/1`, for publishers that validate before sending.

/// JSON Schema (draft 2020-12) of `dr.event/1`, for publishers that validate before sending
/// (the MQTT users asked for it). It states the same rules as [`super::parse_dr_event`]; a test keeps
/// the field lists of the two in step.
pub const DR_EVENT_JSON_SCHEMA: &str = r##"{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "$id": "https://flexgate.invalid/schemas/dr.event-1.json",
  "title": "dr.event/1",
  "description": "A demand-response curtailment event for a flexgate gateway (POST /v1/events, or MQTT topic dr/{site}/events/{event_id}). Documents larger than 65536 bytes or nested deeper than 32 levels are refused. A null optional field means the same as an absent one.",
  "type": "object",
  "additionalProperties": false,
  "required": ["schema", "event_id", "revision", "window"],
  "properties": {
    "schema": { "const": "dr.event/1" },
    "event_id": {
      "description": "Event identity together with revision. Printable, no leading or trailing whitespace.",
      "type": "string", "minLength": 1, "maxLength": 128, "pattern": "^\\S(.*\\S)?$"
    },
    "revision": {
      "description": "Increments on every change, cancellation included. Lower than the held revision: ignored; equal: duplicate; higher: replaces the whole event.",
      "type": "integer", "minimum": 0
    },
    "site": { "type": ["string", "null"], "maxLength": 256 },
    "issued_at": { "type": ["string", "null"], "format": "date-time" },
    "program": { "type": ["string", "null"], "maxLength": 256 },
    "mandatory": { "type": ["boolean", "null"], "description": "Default false." },
    "test": { "type": ["boolean", "null"], "description": "Test events are acknowledged and logged but never change a power cap. Default false." },
    "priority": { "type": ["integer", "null"], "minimum": 0, "maximum": 4294967295 },
    "target": {
      "description": "The event's target; applies to the whole window when intervals is absent, and to every interval that has no target of its own.",
      "$ref": "#/$defs/target"
    },
    "window": { "$ref": "#/$defs/window" },
    "intervals": {
      "description": "Optional schedule: ordered, non-overlapping, inside the window. Offsets are from the (randomized) window start.",
      "type": ["array", "null"], "minItems": 1, "maxItems": 4096,
      "items": { "$ref": "#/$defs/interval" }
    },
    "cancel": { "type": ["boolean", "null"], "description": "This revision cancels the event; it needs no target or intervals (a cancellation of an event the gateway does not hold is recorded, so a later lower revision is stale). Default false." },
    "sig": { "type": ["string", "null"], "description": "Ed25519 signature (base64url, no padding) over the tag \"dr.event/1 sig v2\", a zero byte, the MQTT topic the event is published on, a zero byte and the RFC 8785 canonical JSON of the document without its top-level sig member; checked by the MQTT transport against the configured trusted keys (adapters/mqtt/README.md, Signatures). Not checked by the HTTP API, which authenticates the caller instead." }
  },
  "anyOf": [
    { "required": ["target"], "properties": { "target": { "type": "object" } } },
    {
      "required": ["intervals"],
      "properties": { "intervals": { "type": "array", "items": { "required": ["target"], "properties": { "target": { "type": "object" } } } } }
    },
    { "description": "A cancellation needs no target.", "required": ["cancel"], "properties": { "cancel": { "const": true } } }
  ],
  "$defs": {
    "seconds": { "type": ["integer", "null"], "minimum": 0, "maximum": 604800 },
    "positive_seconds": { "type": ["integer", "null"], "minimum": 1, "maximum": 604800 },
    "window": {
      "type": "object",
      "additionalProperties": false,
      "required": ["start"],
      "properties": {
        "start": { "type": "string", "format": "date-time", "description": "RFC 3339 with an offset, e.g. 2026-07-14T19:00:00Z." },
        "ramp_s": { "$ref": "#/$defs/seconds", "description": "Seconds after the start by which the target must be met. Default 0." },
        "duration_s": { "$ref": "#/$defs/positive_seconds", "description": "Window length; null or absent: open-ended until cancelled." },
        "recovery_s": { "$ref": "#/$defs/seconds", "description": "Seconds over which the ceiling is released after the end. Default 0." },
        "randomize_s": { "type": ["integer", "null"], "minimum": 0, "maximum": 3600, "description": "Maximum start delay the gateway may pick. Default 0." }
      }
    },
    "interval": {
      "type": "object",
      "additionalProperties": false,
      "required": ["offset_s"],
      "properties": {
        "offset_s": { "type": "integer", "minimum": 0, "maximum": 604800 },
        "duration_s": { "$ref": "#/$defs/positive_seconds", "description": "null or absent: until the window ends (last interval only)." },
        "target": { "$ref": "#/$defs/target" }
      }
    },
    "target": {
      "type": "object",
      "additionalProperties": false,
      "required": ["form", "point"],
      "properties": {
        "form": { "enum": ["ceiling", "reduction", "percent", "capacity", "level", "price"] },
        "point": { "const": "meter" },
        "kw": { "type": ["number", "null"], "minimum": 0 },
        "baseline_kw": { "type": ["number", "null"], "minimum": 0 },
        "percent": { "type": ["number", "null"], "exclusiveMinimum": 0, "maximum": 100 },
        "fraction": { "type": ["number", "null"], "minimum": 0, "maximum": 1 },
        "level": { "type": ["integer", "null"], "minimum": 0, "maximum": 3 },
        "price_per_mwh": { "type": ["number", "null"] }
      },
      "allOf": [
        {
          "if": { "required": ["form"], "properties": { "form": { "const": "ceiling" } } },
          "then": {
            "required": ["kw"],
            "properties": { "kw": { "type": "number" }, "baseline_kw": { "type": "null" }, "percent": { "type": "null" }, "fraction": { "type": "null" }, "level": { "type": "null" }, "price_per_mwh": { "type": "null" } }
          }
        },
        {
          "if": { "required": ["form"], "properties": { "form": { "const": "reduction" } } },
          "then": {
            "required": ["kw"],
            "properties": { "kw": { "type": "number" }, "percent": { "type": "null" }, "fraction": { "type": "null" }, "level": { "type": "null" }, "price_per_mwh": { "type": "null" } }
          }
        },
        {
          "if": { "required": ["form"], "properties": { "form": { "const": "percent" } } },
          "then": {
            "required": ["percent"],
            "properties": { "percent": { "type": "number" }, "kw": { "type": "null" }, "fraction": { "type": "null" }, "level": { "type": "null" }, "price_per_mwh": { "type": "null" } }
          }
        },
        {
          "if": { "required": ["form"], "properties": { "form": { "const": "capacity" } } },
          "then": {
            "required": ["fraction"],
            "properties": { "fraction": { "type": "number" }, "kw": { "type": "null" }, "baseline_kw": { "type": "null" }, "percent": { "type": "null" }, "level": { "type": "null" }, "price_per_mwh": { "type": "null" } }
          }
        },
        {
          "if": { "required": ["form"], "properties": { "form": { "const": "level" } } },
          "then": {
            "required": ["level"],
            "properties": { "level": { "type": "integer" }, "kw": { "type": "null" }, "baseline_kw": { "type": "null" }, "percent": { "type": "null" }, "fraction": { "type": "null" }, "price_per_mwh": { "type": "null" } }
          }
        },
        {
          "if": { "required": ["form"], "properties": { "form": { "const": "price" } } },
          "then": {
            "required": ["price_per_mwh"],
            "properties": { "price_per_mwh": { "type": "number" }, "kw": { "type": "null" }, "baseline_kw": { "type": "null" }, "percent": { "type": "null" }, "fraction": { "type": "null" }, "level": { "type": "null" } }
          }
        }
      ]
    }
  }
}
"##;
