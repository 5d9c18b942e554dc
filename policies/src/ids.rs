//! Typed identifiers. A job id, a profile key and a node name are all short strings; as bare
//! `Arc<str>` or `String` a function could take one for another (a job looked up by its profile
//! key) and compile. Each is its own type here, cheap to clone (a shared string), serialized as
//! the plain string it wraps, so the ledger, the API and the config read and write exactly what
//! they did before.

use serde::{Deserialize, Serialize};
use std::borrow::Borrow;
use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

macro_rules! string_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(Arc<str>);

        impl $name {
            /// The identifier as text.
            #[must_use]
            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// The shared string itself, for maps keyed by text of several kinds.
            #[must_use]
            pub fn shared(&self) -> &Arc<str> {
                &self.0
            }
        }

        impl Deref for $name {
            type Target = str;
            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(&*self.0, f)
            }
        }

        impl From<&str> for $name {
            fn from(s: &str) -> Self {
                Self(Arc::from(s))
            }
        }

        impl From<String> for $name {
            fn from(s: String) -> Self {
                Self(Arc::from(s))
            }
        }

        impl From<Arc<str>> for $name {
            fn from(s: Arc<str>) -> Self {
                Self(s)
            }
        }

        impl From<&$name> for $name {
            fn from(s: &$name) -> Self {
                s.clone()
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                *self.0 == *other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                *self.0 == **other
            }
        }
    };
}

string_id!(
    /// A running job, as the scheduler names it (Slurm's job id, the simulator's `job-N`).
    JobId
);

string_id!(
    /// A GPU node, as its agent and the scheduler name it.
    NodeId
);

string_id!(
    /// A grid event, as its sender names it (`dr.event/1` `event_id`, OpenADR `eventID`).
    EventId
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_serializes_as_the_string_it_wraps_and_reads_back() {
        let id = JobId::from("job-7");
        assert_eq!(serde_json::to_string(&id).expect("json"), "\"job-7\"");
        let back: JobId = serde_json::from_str("\"job-7\"").expect("read");
        assert_eq!(back, id);
        assert_eq!(format!("{id}"), "job-7");
        assert_eq!(format!("{id:?}"), "\"job-7\"");
    }

    #[test]
    fn a_map_keyed_by_ids_is_searched_by_text() {
        let mut jobs = std::collections::HashMap::new();
        jobs.insert(JobId::from("a"), 1);
        assert_eq!(jobs.get("a"), Some(&1));
    }
}
