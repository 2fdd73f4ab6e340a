//! Building a node to register through [`ServerApi::register_node`]: a
//! program that embeds herder and runs work its own way (its own
//! executors, simulated capacity) describes each machine here instead of
//! running a client agent.
//!
//! [`ServerApi::register_node`]: crate::ServerApi::register_node

use herder::structs::node::labels;
use herder::structs::{
    DriverInfo, Node, NodeCpuResources, NodeDiskResources, NodeMemoryResources, NodeResources,
    NodeStatus, SharedStr,
};

/// A node description, built field by field.
///
/// The node gets a fresh ID and secret, datacenter `dc1`, class and pool
/// as Nomad's defaults, status ready, and no drivers: add the drivers its
/// jobs use (a job whose tasks name a driver no node has is not placed).
///
/// ```
/// use herder_actors::NodeBuilder;
///
/// let node = NodeBuilder::new("worker-1")
///     .datacenter("eu-1")
///     .cpu(8, 16_000)
///     .memory_mb(32_768)
///     .driver("mock_driver")
///     .attribute("kernel.name", "linux")
///     .build();
/// assert_eq!(node.name, "worker-1");
/// assert!(node.drivers["mock_driver"].healthy);
/// assert!(!node.secret_id.is_empty());
/// ```
#[derive(Clone, Debug)]
pub struct NodeBuilder {
    node: Node,
}

impl NodeBuilder {
    /// A ready node named `name` with 1 core of 1000 MHz, 1 GiB of memory
    /// and 10 GiB of disk until told otherwise.
    pub fn new(name: impl Into<String>) -> NodeBuilder {
        let node = Node {
            id: uuid::Uuid::new_v4(),
            secret_id: uuid::Uuid::new_v4().to_string(),
            datacenter: "dc1".into(),
            name: name.into().into(),
            node_pool: "default".into(),
            status: NodeStatus::Ready,
            node_resources: NodeResources {
                cpu: NodeCpuResources {
                    cpu_shares: 1000,
                    total_cpu_cores: 1,
                    ..Default::default()
                },
                memory: NodeMemoryResources { memory_mb: 1024 },
                disk: NodeDiskResources { disk_mb: 10_240 },
                ..Default::default()
            },
            ..Default::default()
        };
        NodeBuilder { node }
    }

    /// The datacenter jobs select with `datacenters = [...]`.
    pub fn datacenter(mut self, datacenter: impl Into<String>) -> NodeBuilder {
        self.node.datacenter = datacenter.into();
        self
    }

    /// The node class jobs can constrain on (`${node.class}`).
    pub fn node_class(mut self, class: impl Into<String>) -> NodeBuilder {
        self.node.node_class = class.into();
        self
    }

    /// CPU capacity: `cores` cores worth `total_mhz` together.
    pub fn cpu(mut self, cores: u32, total_mhz: i64) -> NodeBuilder {
        let cpu = &mut self.node.node_resources.cpu;
        cpu.total_cpu_cores = cores;
        cpu.cpu_shares = total_mhz;
        self
    }

    /// Memory capacity in MiB.
    pub fn memory_mb(mut self, memory_mb: i64) -> NodeBuilder {
        self.node.node_resources.memory.memory_mb = memory_mb;
        self
    }

    /// Disk capacity in MiB.
    pub fn disk_mb(mut self, disk_mb: i64) -> NodeBuilder {
        self.node.node_resources.disk.disk_mb = disk_mb;
        self
    }

    /// A detected, healthy driver (`exec`, `raw_exec`, `mock_driver`, or a
    /// name of the program's own).
    pub fn driver(mut self, name: impl Into<String>) -> NodeBuilder {
        self.node.drivers.insert(
            SharedStr::interned(&name.into()),
            DriverInfo {
                detected: true,
                healthy: true,
                ..Default::default()
            },
        );
        self
    }

    /// A fingerprinted attribute (`${attr.<key>}` in constraints).
    pub fn attribute(mut self, key: impl Into<String>, value: impl Into<String>) -> NodeBuilder {
        let (key, value) = (key.into(), value.into());
        self.node.attributes.extend(labels([(key, value)]));
        self
    }

    /// User metadata (`${meta.<key>}` in constraints).
    pub fn meta(mut self, key: impl Into<String>, value: impl Into<String>) -> NodeBuilder {
        let (key, value) = (key.into(), value.into());
        self.node.meta.extend(labels([(key, value)]));
        self
    }

    /// The node, its computed class filled in.
    pub fn build(mut self) -> Node {
        self.node.compute_class();
        self.node
    }
}
