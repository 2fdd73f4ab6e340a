//! The set of drivers a client offers, by name, and the built-in drivers
//! by theirs. Apart from the driver contract in `driver/mod.rs` because it
//! names the built-in drivers, which implement that contract.

use super::mock::{self, MockDriver};
use super::raw_exec::{self, RawExecDriver};
use super::Driver;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The drivers a client offers, by name.
#[derive(Clone, Default)]
pub struct DriverSet {
    drivers: BTreeMap<String, Arc<dyn Driver>>,
}

impl DriverSet {
    /// The built-in drivers named in `names` (unknown names are skipped and
    /// returned so the caller can warn about them).
    pub fn from_names(names: &[String]) -> (DriverSet, Vec<String>) {
        let mut set = DriverSet::default();
        let mut unknown = Vec::new();
        for name in names {
            match name.as_str() {
                raw_exec::NAME => set.insert(Arc::new(RawExecDriver::new())),
                mock::NAME => set.insert(Arc::new(MockDriver::new())),
                other => unknown.push(other.to_string()),
            }
        }
        (set, unknown)
    }

    pub fn insert(&mut self, driver: Arc<dyn Driver>) {
        self.drivers.insert(driver.name().to_string(), driver);
    }

    pub fn get(&self, name: &str) -> Option<Arc<dyn Driver>> {
        self.drivers.get(name).cloned()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Arc<dyn Driver>> {
        self.drivers.values()
    }
}
