//! The set of drivers a client offers, by name, and the built-in drivers
//! by theirs. Apart from the driver contract in `driver/mod.rs` because it
//! names the built-in drivers, which implement that contract.

use super::exec::{self, ExecDriver};
use super::mock::{self, MockDriver};
use super::raw_exec::{self, RawExecDriver};
use super::Driver;
use herder_common::config::ClientConfig;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The client settings the built-in drivers read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DriverOptions {
    /// Offer `raw_exec` (`client.raw_exec_enabled`); off by default.
    pub raw_exec_enabled: bool,
    /// Host path => path in the chroot of an `exec` task
    /// (`client.chroot_env`); an empty destination leaves the path out.
    pub chroot_env: BTreeMap<String, String>,
}

impl DriverOptions {
    pub fn from_client_config(c: &ClientConfig) -> Self {
        DriverOptions {
            raw_exec_enabled: c.raw_exec_enabled,
            chroot_env: c.chroot_env.clone(),
        }
    }
}

/// The drivers a client offers, by name.
#[derive(Clone, Default)]
pub struct DriverSet {
    drivers: BTreeMap<String, Arc<dyn Driver>>,
}

impl DriverSet {
    /// The built-in drivers named in `names` (unknown names are skipped and
    /// returned so the caller can warn about them).
    pub fn from_names(names: &[String], options: &DriverOptions) -> (DriverSet, Vec<String>) {
        let mut set = DriverSet::default();
        let mut unknown = Vec::new();
        for name in names {
            match name.as_str() {
                raw_exec::NAME => {
                    set.insert(Arc::new(RawExecDriver::new(options.raw_exec_enabled)))
                }
                exec::NAME => set.insert(Arc::new(ExecDriver::new(options.chroot_env.clone()))),
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
