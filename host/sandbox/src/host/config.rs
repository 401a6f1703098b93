//! `nimbus:handler/config`: the manifest's `[config]` table, read-only.

use crate::bindings::config::Host;
use crate::state::ConfigView;

impl Host for ConfigView<'_> {
    fn get(&mut self, key: String) -> Option<String> {
        self.config.get(&key).cloned()
    }

    fn get_all(&mut self) -> Vec<(String, String)> {
        // A BTreeMap iterates sorted by key, as the WIT promises.
        self.config
            .iter()
            .map(|(key, value)| (key.clone(), value.clone()))
            .collect()
    }
}
