//! `StateStore`: the single writer, durable group commit, snapshots,
//! blocking waits and change subscriptions.
//!
//! Callers queue commands on a channel. Two threads form a pipeline:
//! the writer takes everything queued, applies it in order to its own
//! copy of the state (cheap: persistent maps) and encodes the changed rows
//! (the CPU-heavy part of persisting); the persister takes every
//! applied group waiting for it, writes all their changed rows in one sled
//! batch, flushes once, and only then publishes the newest state and
//! answers the callers. Concurrent writers share one fsync, the next
//! commands are applied while the previous ones are being flushed, and no
//! reader ever sees a change that a crash could still undo.
//!
//! The store uses std threads, mutexes and condition variables for
//! blocking callers and runtime-agnostic `futures` channels for async
//! ones, so any executor (or none) can drive it.

use super::changes::{AppliedChanges, TableSet};
use super::command::Command;
use super::persist;
use super::quarantine::QuarantinedRecord;
use super::sled_lock;
use super::snapshot::StateSnapshot;
use super::wal::{self, ClosedSegment, WalWriter};
use super::StoreError;
use crate::structs::NodeId;
use futures::channel::{mpsc as async_mpsc, oneshot};
use std::collections::{HashMap, HashSet, VecDeque};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Tuning of a store.
#[derive(Clone, Debug)]
pub struct StoreOptions {
    /// sled's page cache (the tables themselves live in memory anyway).
    pub cache_capacity_bytes: u64,
    /// How many recent applied commands subscribers can replay.
    pub event_buffer: usize,
    /// Most changed rows those commands may hold together: a plan changes
    /// up to thousands of allocations, so 4,096 commands could hold every
    /// allocation of a large cluster, and once clients report on them, an
    /// old copy of each beside the tables' current one. A follower further
    /// behind resyncs from a snapshot; the event stream starts from the
    /// oldest command it still holds, as Nomad's bounded buffer does.
    pub event_buffer_rows: usize,
    /// How many applied commands a subscriber may fall behind before it is
    /// disconnected (it can resubscribe from its last index).
    pub subscriber_capacity: usize,
    /// Most commands committed with one flush.
    pub max_batch: usize,
    /// A log segment is closed (and a new one started) past this size.
    pub wal_segment_bytes: u64,
    /// Closed log segments are folded into sled once they add up to this
    /// much: the log a restart replays stays under it (plus a segment).
    pub checkpoint_bytes: u64,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            cache_capacity_bytes: 16 * 1024 * 1024,
            event_buffer: 4096,
            event_buffer_rows: 65_536,
            subscriber_capacity: 1024,
            max_batch: 4096,
            // A restart holds up to three segments at once while it
            // replays them (`persist::replay`): 16 MiB segments keep that
            // under 50 MiB over the state (64 MiB ones took 150 MiB).
            wal_segment_bytes: 16 << 20,
            // A restart replays up to this much log (about 1.5 million
            // allocation rows: a few seconds); checkpointing more often
            // would spend the CPU the log saves on the commit path.
            checkpoint_bytes: 512 << 20,
        }
    }
}

/// What an applied command produced.
#[derive(Clone, Debug)]
pub struct ApplyOutcome {
    /// The index the command was applied at.
    pub index: u64,
    /// The rows it changed, with their new values.
    pub changes: Arc<AppliedChanges>,
}

/// A subscription to applied changes: first the buffered changes at or
/// after the requested index, then every new one as it is published.
pub struct Subscription {
    pub backlog: Vec<Arc<AppliedChanges>>,
    /// True when changes between the requested index and the backlog's
    /// start are no longer buffered.
    pub missed: bool,
    /// Closed when the store closes or the subscriber falls too far behind.
    pub receiver: async_mpsc::Receiver<Arc<AppliedChanges>>,
}

type Reply = oneshot::Sender<Result<ApplyOutcome, StoreError>>;

/// A leader's write seen at two moments (`submit_staged_as_leader`).
///
/// `applied` gets the writer's state right after the command, before that
/// state is flushed: it holds the command and everything queued before
/// it, and may be checked against, since a write that later fails to
/// flush fails every write after it too (the store refuses writes once
/// one failed). It is dropped unsent when the command is refused, when
/// the store has failed, and always on a replica, whose writes are
/// visible only once committed. `durable` is the outcome, as `submit`'s.
pub struct StagedWrite {
    pub applied: oneshot::Receiver<StateSnapshot>,
    pub durable: oneshot::Receiver<Result<ApplyOutcome, StoreError>>,
}

/// The outcome of each command of a batch applied at one index (see
/// [`StateStore::submit_batch_at`]).
pub type BatchOutcome = Vec<Result<ApplyOutcome, super::ApplyError>>;

type BatchReply = oneshot::Sender<Result<BatchOutcome, StoreError>>;

/// What callers queue for the writer.
// `One`, the command path of every single-server write, is the large
// variant: boxing it would add an allocation to each of them.
#[allow(clippy::large_enum_variant)]
enum Request {
    /// One command at the next index (`submit`); `applied`, when given,
    /// gets the writer's state right after it (`submit_staged_as_leader`).
    One {
        command: Command,
        reply: Reply,
        applied: Option<oneshot::Sender<StateSnapshot>>,
    },
    /// Commands at an index a replicated log chose (`submit_batch_at`).
    Batch {
        index: u64,
        commands: Vec<Command>,
        position: Vec<u8>,
        reply: BatchReply,
    },
    /// A whole state replacing this one (`import_checkpoint`).
    Import(Import),
}

/// Where an imported state lands.
enum ImportAt {
    /// At its own index, which must be newer than the store's (a
    /// replica's `import_checkpoint`).
    Own,
    /// At a new index after both its own and the store's, keeping the
    /// store's log position (`restore_checkpoint`: a single server's
    /// operator restore).
    NextIndex,
    /// At exactly this index, newer than the store's, with this log
    /// position (`restore_checkpoint_at`: a restore applied from the
    /// replicated log).
    Exactly { index: u64, position: Vec<u8> },
}

/// A decoded checkpoint on its way to replace the state.
struct Import {
    state: StateSnapshot,
    /// Every row of `state`, encoded for sled.
    rows: wal::EncodedRows,
    /// Where the imported state lands.
    at: ImportAt,
    /// The index the state stands at once imported.
    reply: oneshot::Sender<Result<u64, StoreError>>,
}

impl Import {
    /// Moves the imported state to `index`, keeping the store's log
    /// position, and re-encodes its meta row to match.
    fn restamp(&mut self, index: u64, position: Option<&[u8]>) -> Result<(), StoreError> {
        self.state.restamp(index, position);
        self.rows.meta = persist::encode_meta(&self.state)?;
        self.rows.last_index = index;
        Ok(())
    }
}

impl Request {
    fn fail(self, error: StoreError) {
        match self {
            Request::One { reply, .. } => {
                let _ = reply.send(Err(error));
            }
            Request::Batch { reply, .. } => {
                let _ = reply.send(Err(error));
            }
            Request::Import(import) => {
                let _ = import.reply.send(Err(error));
            }
        }
    }
}

/// A request applied by the writer, waiting for its group's commit.
enum Answer {
    One(Reply, Result<Arc<AppliedChanges>, super::ApplyError>),
    /// Empty for a replayed batch (at or below the latest index).
    Batch(
        BatchReply,
        Vec<Result<Arc<AppliedChanges>, super::ApplyError>>,
    ),
}

impl Answer {
    fn results(&self) -> &[Result<Arc<AppliedChanges>, super::ApplyError>] {
        match self {
            Answer::One(_, result) => std::slice::from_ref(result),
            Answer::Batch(_, results) => results,
        }
    }

    fn fail(self, reason: &str) {
        let error = || StoreError::Failed(reason.to_string());
        match self {
            Answer::One(reply, _) => {
                let _ = reply.send(Err(error()));
            }
            Answer::Batch(reply, _) => {
                let _ = reply.send(Err(error()));
            }
        }
    }

    fn send(self) {
        let outcome = |changes: Arc<AppliedChanges>| ApplyOutcome {
            index: changes.index,
            changes,
        };
        match self {
            Answer::One(reply, result) => {
                let _ = reply.send(result.map(outcome).map_err(StoreError::Rejected));
            }
            Answer::Batch(reply, results) => {
                let results = results.into_iter().map(|r| r.map(outcome)).collect();
                let _ = reply.send(Ok(results));
            }
        }
    }
}

/// A pending `watch`: answered with the index once a table in `tables`
/// changes past `after`.
struct Watcher {
    tables: TableSet,
    after: u64,
    reply: oneshot::Sender<u64>,
}

/// A pending `watch_node_allocs`: answered with the node's allocation
/// index once it passes `after`.
struct NodeWatcher {
    after: u64,
    reply: oneshot::Sender<u64>,
}

/// Watchers of single nodes' allocations, keyed by node so that applying a
/// command costs O(nodes it touched), whatever the number of watchers (a
/// client per node long-polls its allocations: thousands of them).
#[derive(Default)]
struct NodeWatchers {
    by_node: HashMap<NodeId, Vec<NodeWatcher>>,
    /// When the map has this many nodes, the next insert sweeps out
    /// watchers whose caller went away (disconnected, timed out), so nodes
    /// that stopped polling do not pile up. Doubling it after each sweep
    /// keeps the sweeps' cost amortised O(1) per insert.
    sweep_at: usize,
}

/// The map size under which sweeping is not worth it.
const MIN_NODE_WATCHER_SWEEP: usize = 1024;

impl NodeWatchers {
    fn insert(&mut self, node_id: NodeId, watcher: NodeWatcher) {
        if self.by_node.len() >= self.sweep_at.max(MIN_NODE_WATCHER_SWEEP) {
            self.by_node.retain(|_, list| {
                list.retain(|w| !w.reply.is_canceled());
                !list.is_empty()
            });
            self.sweep_at = self.by_node.len() * 2;
        }
        let list = self.by_node.entry(node_id).or_default();
        // A client that re-polls after each timeout leaves its old, closed
        // watcher behind: drop those here rather than let the list grow.
        list.retain(|w| !w.reply.is_canceled());
        list.push(watcher);
    }

    /// Answers the watchers of `node_id` whose index has passed.
    fn wake(&mut self, node_id: &NodeId, state: &StateSnapshot) {
        let Some(list) = self.by_node.get_mut(node_id) else {
            return;
        };
        let now = node_allocs_index(state, node_id);
        let pending = std::mem::take(list);
        for w in pending {
            if w.reply.is_canceled() {
                continue;
            }
            if now > w.after {
                let _ = w.reply.send(now);
            } else {
                list.push(w);
            }
        }
        if list.is_empty() {
            self.by_node.remove(node_id);
        }
    }

    fn len(&self) -> usize {
        self.by_node.values().map(Vec::len).sum()
    }
}

/// The index a node's allocations are at, as Nomad's client allocation
/// query answers it: the highest modify index among the node's
/// allocations, or the allocations table's index when it has none.
pub fn node_allocs_index(state: &StateSnapshot, node_id: &NodeId) -> u64 {
    state
        .allocs_by_node(node_id)
        .map(|a| a.modify_index)
        .max()
        .unwrap_or_else(|| state.table_index(super::Table::Allocs))
}

/// The nodes whose allocations `applied` changed. A deleted allocation is
/// no longer in the new state; the state before tells whose it was.
fn touched_nodes(applied: &[Arc<AppliedChanges>], before: &StateSnapshot) -> HashSet<NodeId> {
    let mut nodes = HashSet::new();
    for change in applied.iter().flat_map(|c| c.changes.iter()) {
        match (&change.key, &change.row) {
            (_, Some(super::Row::Alloc(alloc))) => {
                nodes.insert(alloc.node_id);
            }
            (super::RowKey::Alloc { id, .. }, None) => {
                if let Some(alloc) = before.alloc(id) {
                    nodes.insert(alloc.node_id);
                }
            }
            _ => {}
        }
    }
    nodes
}

/// Who is told about new changes.
#[derive(Default)]
struct Notifiers {
    watchers: Vec<Watcher>,
    node_watchers: NodeWatchers,
    events: EventBuffer,
    subscribers: Vec<async_mpsc::Sender<Arc<AppliedChanges>>>,
}

/// The recent applied commands a new subscriber replays, bounded by count
/// and by the rows they hold (`StoreOptions::event_buffer{,_rows}`). The
/// newest command always stays, however many rows it changed.
#[derive(Default)]
struct EventBuffer {
    commands: VecDeque<Arc<AppliedChanges>>,
    rows: usize,
}

impl EventBuffer {
    fn push(&mut self, changes: Arc<AppliedChanges>, options: &StoreOptions) {
        self.rows += changes.changes.len();
        self.commands.push_back(changes);
        while self.commands.len() > 1
            && (self.commands.len() > options.event_buffer || self.rows > options.event_buffer_rows)
        {
            if let Some(oldest) = self.commands.pop_front() {
                self.rows -= oldest.changes.len();
            }
        }
    }

    fn clear(&mut self) {
        self.commands.clear();
        self.rows = 0;
    }

    fn oldest_index(&self) -> Option<u64> {
        self.commands.front().map(|c| c.index)
    }

    fn since(&self, from_index: u64) -> Vec<Arc<AppliedChanges>> {
        self.commands
            .iter()
            .filter(|c| c.index >= from_index)
            .cloned()
            .collect()
    }
}

/// State shared between callers and the writer thread.
struct Shared {
    current: Mutex<StateSnapshot>,
    /// Set when a write failed: what is on disk is then unknown, so no
    /// further write is accepted.
    failed: Mutex<Option<String>>,
    changed: Condvar,
    notifiers: Mutex<Notifiers>,
    options: StoreOptions,
    /// The quarantine tree as open left it (nothing adds to it while the
    /// store is open: only loading finds rows it cannot load).
    quarantined: Vec<QuarantinedRecord>,
}

impl Shared {
    fn current(&self) -> MutexGuard<'_, StateSnapshot> {
        // A panic while holding the lock cannot leave a half-written
        // snapshot (it is replaced whole), so a poisoned lock is usable.
        self.current.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn notifiers(&self) -> MutexGuard<'_, Notifiers> {
        self.notifiers.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn failure(&self) -> Option<String> {
        self.failed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// The handle every clone of a store shares; dropping the last one closes
/// the store.
struct Handle {
    shared: Arc<Shared>,
    sender: Mutex<Option<mpsc::Sender<Request>>>,
    writer: Mutex<Option<JoinHandle<()>>>,
    /// Set when the store is a replica of a replicated log: `submit`
    /// proposes there instead of applying here.
    replicator: std::sync::RwLock<Option<Arc<dyn Replicator>>>,
    /// A durable store's data dir: closing waits until sled has let go of
    /// its lock there (see `sled_lock`).
    dir: Option<PathBuf>,
}

/// Where a replica's writes go: the replicated log that numbers and
/// commits them, then applies them to every replica's store through
/// [`StateStore::submit_batch_at`] (herder-raft implements it).
///
/// The answer is the same as the store's own: once the command is
/// committed and applied on this server (its [`ApplyOutcome`] carries the
/// index and no changed rows: subscribers see those), or why not.
pub trait Replicator: Send + Sync {
    fn propose(&self, command: Command) -> oneshot::Receiver<Result<ApplyOutcome, StoreError>>;

    /// As [`Self::propose`], for a write this server makes as leader (a
    /// plan it checked, a status its broker decided): committed only while
    /// this server leads, never handed to another leader, which did not
    /// make that decision and might not make it on its state.
    fn propose_as_leader(
        &self,
        command: Command,
    ) -> oneshot::Receiver<Result<ApplyOutcome, StoreError>>;
}

impl ApplyOutcome {
    /// The outcome of a command committed through a [`Replicator`]: its
    /// index, without the changed rows (the change feed has them).
    pub fn committed(index: u64, command: &'static str) -> ApplyOutcome {
        ApplyOutcome {
            index,
            changes: Arc::new(AppliedChanges {
                index,
                command,
                tables: TableSet::default(),
                changes: Vec::new(),
            }),
        }
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.close();
    }
}

impl Handle {
    fn close(&self) {
        // The replicator holds the log, which holds this store: let go of
        // it so the cycle ends.
        self.replicator
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        let sender = self.sender.lock().unwrap_or_else(|e| e.into_inner()).take();
        drop(sender);
        let writer = self.writer.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(writer) = writer {
            if writer.join().is_err() {
                tracing::error!("the state writer thread panicked");
            }
            // The writer dropped the last sled handle; sled's own threads
            // may hold its lock a moment longer.
            if let Some(dir) = &self.dir {
                if !sled_lock::wait_until_unlocked(dir, sled_lock::RELEASE_WAIT) {
                    tracing::warn!(dir = %dir.display(), "the data dir is still locked after the store closed");
                }
            }
        }
    }
}

/// The state store. Cheap to clone; all clones share one writer.
#[derive(Clone)]
pub struct StateStore {
    handle: Arc<Handle>,
}

impl StateStore {
    /// Opens the data dir (creating it when new), upgrading an older format
    /// and refusing a newer or corrupt one. A single row that cannot be
    /// loaded does not stop it: it is quarantined (see [`Self::quarantined`]
    /// and `persist`'s module doc for what stays fatal).
    pub fn open(dir: impl AsRef<Path>, options: StoreOptions) -> Result<StateStore, StoreError> {
        let dir = dir.as_ref();
        std::fs::create_dir_all(dir).map_err(|e| StoreError::Open {
            path: dir.display().to_string(),
            source: sled::Error::Io(e),
        })?;
        let db = persist::open_db(dir, options.cache_capacity_bytes)?;
        let wal_dir = dir.join(wal::WAL_DIR);
        let loaded = persist::load(&db, &wal_dir)?;
        if !loaded.quarantined.is_empty() {
            tracing::warn!(
                count = loaded.quarantined.len(),
                "the data dir holds quarantined rows, left out of the state; \
                 an operator can inspect them in the data dir's quarantine tree"
            );
        }
        let disk = Disk {
            dir: dir.to_path_buf(),
            log: WalWriter::start(&wal_dir, loaded.last_seq, options.wal_segment_bytes)?,
            db,
            closed: loaded.segments,
        };
        Ok(Self::start(
            StateSnapshot::from_tables(loaded.tables),
            Some(disk),
            options,
            loaded.quarantined,
        ))
    }

    /// A store without persistence (tests, simulations).
    pub fn in_memory() -> StateStore {
        Self::in_memory_with(StoreOptions::default())
    }

    /// A store without persistence, with the given options.
    pub fn in_memory_with(options: StoreOptions) -> StateStore {
        Self::start(StateSnapshot::new(), None, options, Vec::new())
    }

    fn start(
        state: StateSnapshot,
        disk: Option<Disk>,
        options: StoreOptions,
        quarantined: Vec<QuarantinedRecord>,
    ) -> StateStore {
        let shared = Arc::new(Shared {
            current: Mutex::new(state),
            failed: Mutex::new(None),
            changed: Condvar::new(),
            notifiers: Mutex::new(Notifiers::default()),
            options,
            quarantined,
        });
        let dir = disk.as_ref().map(|d| d.dir.clone());
        let (sender, receiver) = mpsc::channel();
        let writer = Writer {
            state: shared.current().clone(),
            shared: shared.clone(),
            durable: disk.is_some(),
            disk,
        };
        let thread = std::thread::Builder::new()
            .name("herder-state-writer".into())
            .spawn(move || writer.run(receiver));
        let (sender, thread) = match thread {
            Ok(thread) => (Some(sender), Some(thread)),
            Err(e) => {
                tracing::error!(error = %e, "cannot start the state writer thread");
                (None, None)
            }
        };
        StateStore {
            handle: Arc::new(Handle {
                shared,
                sender: Mutex::new(sender),
                writer: Mutex::new(thread),
                replicator: std::sync::RwLock::new(None),
                dir,
            }),
        }
    }

    fn shared(&self) -> &Shared {
        &self.handle.shared
    }

    /// Makes this store a replica of `replicator`'s log: from now on
    /// `submit` proposes commands there, and only the log applies them
    /// (through [`Self::submit_batch_at`]). Set once, before any write.
    pub fn set_replicator(&self, replicator: Arc<dyn Replicator>) {
        *self
            .handle
            .replicator
            .write()
            .unwrap_or_else(|e| e.into_inner()) = Some(replicator);
    }

    /// Whether writes go through a replicated log.
    pub fn is_replica(&self) -> bool {
        self.handle
            .replicator
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }

    /// Queues a command; the receiver gets the outcome once the command is
    /// durable and visible (or its rejection). On a replica the command is
    /// proposed to the replicated log instead and answered once committed
    /// and applied here.
    pub fn submit(&self, command: Command) -> oneshot::Receiver<Result<ApplyOutcome, StoreError>> {
        if let Some(replicator) = self.replicator() {
            return replicator.propose(command);
        }
        self.submit_here(command)
    }

    /// As [`Self::submit`], for the leader's own decisions (its plan
    /// applier, broker, heartbeat timers, drainer, launcher, GC): on a
    /// replica the write commits only while this server leads and is
    /// never forwarded to another leader ([`Replicator::propose_as_leader`]).
    /// A single server is always its own leader: the same as `submit`.
    pub fn submit_as_leader(
        &self,
        command: Command,
    ) -> oneshot::Receiver<Result<ApplyOutcome, StoreError>> {
        if let Some(replicator) = self.replicator() {
            return replicator.propose_as_leader(command);
        }
        self.submit_here(command)
    }

    fn replicator(&self) -> Option<Arc<dyn Replicator>> {
        self.handle
            .replicator
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// As [`Self::submit_as_leader`], and tells the caller the state the
    /// command makes as soon as it is applied in memory, ahead of its
    /// flush (see [`StagedWrite`]).
    pub fn submit_staged_as_leader(&self, command: Command) -> StagedWrite {
        let (applied, applied_rx) = oneshot::channel();
        if let Some(replicator) = self.replicator() {
            // A replica's write is visible only once the log commits it:
            // `applied` is dropped unsent, and `durable` is the moment.
            drop(applied);
            return StagedWrite {
                applied: applied_rx,
                durable: replicator.propose_as_leader(command),
            };
        }
        let (reply, durable) = oneshot::channel();
        self.queue(Request::One {
            command,
            reply,
            applied: Some(applied),
        });
        StagedWrite {
            applied: applied_rx,
            durable,
        }
    }

    /// Queues a command on this store's own writer.
    fn submit_here(&self, command: Command) -> oneshot::Receiver<Result<ApplyOutcome, StoreError>> {
        let (reply, receiver) = oneshot::channel();
        self.queue(Request::One {
            command,
            reply,
            applied: None,
        });
        receiver
    }

    fn queue(&self, request: Request) {
        let sender = self.handle.sender.lock().unwrap_or_else(|e| e.into_inner());
        let unsent = match sender.as_ref() {
            Some(sender) => sender.send(request).err().map(|e| e.0),
            None => Some(request),
        };
        if let Some(request) = unsent {
            request.fail(StoreError::Closed);
        }
    }

    /// Queues `commands` to be applied at `index`, chosen by a replicated
    /// log (the entry's log index; indexes may skip, and every command of
    /// the batch gets this one index), and `position` (where the log
    /// stands, opaque here) to be stored with the result in the same log
    /// record. Each command is all or nothing; a rejected one leaves the
    /// others applied. A batch at or below the latest index is a replay:
    /// it is answered with no outcomes and changes nothing. The receiver
    /// gets the outcomes once the batch is durable and visible.
    ///
    /// A store is driven either by this or by `submit`, never both: the
    /// two number commands differently.
    pub fn submit_batch_at(
        &self,
        index: u64,
        commands: Vec<Command>,
        position: Vec<u8>,
    ) -> oneshot::Receiver<Result<BatchOutcome, StoreError>> {
        let (reply, receiver) = oneshot::channel();
        self.queue(Request::Batch {
            index,
            commands,
            position,
            reply,
        });
        receiver
    }

    /// [`Self::submit_batch_at`], returning once the batch is durable.
    pub fn apply_batch_at(
        &self,
        index: u64,
        commands: Vec<Command>,
        position: Vec<u8>,
    ) -> Result<BatchOutcome, StoreError> {
        futures::executor::block_on(self.submit_batch_at(index, commands, position))
            .unwrap_or(Err(StoreError::Closed))
    }

    /// Several batches (index, commands, position), queued at once and
    /// applied in order as [`Self::submit_batch_at`] each: the group
    /// commit makes them durable together, with one sync instead of one
    /// per batch. Returns once all are durable, each batch's outcome in
    /// order.
    pub fn apply_batches_at(
        &self,
        batches: Vec<(u64, Vec<Command>, Vec<u8>)>,
    ) -> Vec<Result<BatchOutcome, StoreError>> {
        let receivers: Vec<_> = batches
            .into_iter()
            .map(|(index, commands, position)| self.submit_batch_at(index, commands, position))
            .collect();
        receivers
            .into_iter()
            .map(|r| futures::executor::block_on(r).unwrap_or(Err(StoreError::Closed)))
            .collect()
    }

    /// The position stored with the latest applied batch or imported
    /// checkpoint (`None`: never set), as durable as the state it
    /// describes: it is read back at open.
    pub fn applied_position(&self) -> Option<Vec<u8>> {
        self.shared()
            .current()
            .applied_position()
            .map(<[u8]>::to_vec)
    }

    /// Writes a checkpoint of the state as it is now to `out` and returns
    /// the position stored with that state. Taken from the published state
    /// (an O(1) snapshot): writes go on meanwhile, and the checkpoint is
    /// exactly one index. The archive holds every row as sled stores it
    /// and the meta row (format version, indexes), in `wal`'s checksummed
    /// record encoding behind a magic; derived indexes are rebuilt on
    /// import.
    pub fn export_checkpoint(&self, out: &mut dyn Write) -> Result<Option<Vec<u8>>, StoreError> {
        let state = self.snapshot();
        let archive = StateStore::encode_checkpoint(&state)?;
        out.write_all(&archive)
            .map_err(|e| StoreError::Checkpoint(format!("writing the checkpoint: {e}")))?;
        Ok(state.applied_position().map(<[u8]>::to_vec))
    }

    /// The checkpoint archive of `state` (a snapshot of any store), as
    /// `export_checkpoint` writes it: for a caller that needs to know
    /// which state (index) the archive holds.
    pub fn encode_checkpoint(state: &StateSnapshot) -> Result<Vec<u8>, StoreError> {
        let rows = persist::encode_state(state)?;
        let mut archive = Vec::new();
        persist::encode_archive(&mut archive, &rows)?;
        Ok(archive)
    }

    /// Replaces the whole state by a checkpoint from `export_checkpoint`
    /// (of this or another server; an older data format is migrated as
    /// `open` migrates one), storing `position` with it, durably, before
    /// returning. Derived indexes are rebuilt as at open. Blocking queries
    /// and watchers see the new state at once; subscribers' streams end
    /// and the change buffer is emptied, so a subscriber that subscribes
    /// again is told it `missed` changes and rebuilds from a snapshot.
    /// Only a checkpoint at a later index than the state's (or any, into
    /// an empty store) is accepted: an older one could be overtaken at the
    /// next open by log records it replaced.
    pub fn import_checkpoint(
        &self,
        checkpoint: &mut dyn Read,
        position: Vec<u8>,
    ) -> Result<(), StoreError> {
        let mut bytes = Vec::new();
        checkpoint
            .read_to_end(&mut bytes)
            .map_err(|e| StoreError::Checkpoint(format!("reading the checkpoint: {e}")))?;
        let mut state = StateSnapshot::from_tables(persist::decode_archive(&bytes)?.0);
        drop(bytes);
        state.set_applied_position(&position);
        self.queue_import(state, ImportAt::Own).map(|_| ())
    }

    /// Reads a checkpoint from `export_checkpoint` into a state of its
    /// own, touching no store: what an operator's restore checks before
    /// anything changes, and what `operator snapshot inspect` counts.
    /// Stricter than `import_checkpoint`: a row that cannot be loaded is
    /// an error here, not left out.
    pub fn decode_checkpoint(bytes: &[u8]) -> Result<StateSnapshot, StoreError> {
        let (tables, left_out) = persist::decode_archive(bytes)?;
        if left_out > 0 {
            return Err(StoreError::Checkpoint(format!(
                "{left_out} rows of the checkpoint cannot be loaded"
            )));
        }
        Ok(StateSnapshot::from_tables(tables))
    }

    /// Replaces the whole state by `state` (from [`Self::decode_checkpoint`]:
    /// an operator restoring a backup), durably, and returns the index it
    /// now stands at. Every row is as saved; the state's index moves to
    /// one past both the saved index and this store's, and every table's
    /// index with it, so blocking queries and watchers wake and the next
    /// write numbers on from there. Subscribers resync as after
    /// `import_checkpoint`. The store's own log position is kept.
    pub fn restore_checkpoint(&self, state: StateSnapshot) -> Result<u64, StoreError> {
        self.queue_import(state, ImportAt::NextIndex)
    }

    /// Replaces the whole state by `state`, as [`Self::restore_checkpoint`]
    /// does, but at exactly `index` with `position` as the log position,
    /// stored with it atomically: an operator's restore applied from the
    /// replicated log, where every replica must end at the same index.
    /// `index` must be past the store's latest (`ImportBehind` otherwise).
    pub fn restore_checkpoint_at(
        &self,
        state: StateSnapshot,
        index: u64,
        position: Vec<u8>,
    ) -> Result<u64, StoreError> {
        self.queue_import(state, ImportAt::Exactly { index, position })
    }

    fn queue_import(&self, state: StateSnapshot, at: ImportAt) -> Result<u64, StoreError> {
        let rows = persist::encode_state(&state)?;
        let (reply, receiver) = oneshot::channel();
        self.queue(Request::Import(Import {
            state,
            rows,
            at,
            reply,
        }));
        futures::executor::block_on(receiver).unwrap_or(Err(StoreError::Closed))
    }

    /// Applies a command and returns once it is durable and visible.
    pub fn apply(&self, command: Command) -> Result<ApplyOutcome, StoreError> {
        futures::executor::block_on(self.submit(command)).unwrap_or(Err(StoreError::Closed))
    }

    /// The rows of the data dir that could not be loaded and were left out
    /// of the state, in key order: this open's and earlier ones' still in
    /// the quarantine tree (empty for a store without disk).
    pub fn quarantined(&self) -> Vec<QuarantinedRecord> {
        self.shared().quarantined.clone()
    }

    /// The latest durable state (O(1)).
    pub fn snapshot(&self) -> StateSnapshot {
        self.shared().current().clone()
    }

    /// The index of the last applied command.
    pub fn latest_index(&self) -> u64 {
        self.shared().current().latest_index()
    }

    /// Waits until the store has applied `index`, then returns a snapshot.
    pub fn snapshot_min_index(
        &self,
        index: u64,
        timeout: Duration,
    ) -> Result<StateSnapshot, StoreError> {
        let shared = self.shared();
        let deadline = Instant::now() + timeout;
        let mut current = shared.current();
        while current.latest_index() < index {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(StoreError::Timeout {
                    index,
                    latest: current.latest_index(),
                });
            }
            current = shared
                .changed
                .wait_timeout(current, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        Ok(current.clone())
    }

    /// Blocks until one of `tables` changes after `after_index` or the
    /// timeout passes, and returns the state then (a blocking query answers
    /// with the current data either way).
    pub fn wait_for_change(
        &self,
        tables: TableSet,
        after_index: u64,
        timeout: Duration,
    ) -> StateSnapshot {
        let shared = self.shared();
        let deadline = Instant::now() + timeout;
        let mut current = shared.current();
        while max_index(&current, tables) <= after_index {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            current = shared
                .changed
                .wait_timeout(current, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        current.clone()
    }

    /// Resolves with the new index once one of `tables` changes after
    /// `after_index`. Never polls: the writer completes it. The caller owns
    /// the timeout (drop the receiver to stop watching).
    pub fn watch(&self, tables: TableSet, after_index: u64) -> oneshot::Receiver<u64> {
        let (reply, receiver) = oneshot::channel();
        let mut notifiers = self.shared().notifiers();
        let now = max_index(&self.shared().current(), tables);
        if now > after_index {
            let _ = reply.send(now);
        } else {
            notifiers.watchers.push(Watcher {
                tables,
                after: after_index,
                reply,
            });
        }
        receiver
    }

    /// Resolves with the node's allocation index (see [`node_allocs_index`])
    /// once it passes `after_index`: only a change to one of this node's
    /// allocations wakes it, never another node's. The caller owns the
    /// timeout (drop the receiver to stop watching; it is cleaned up).
    pub fn watch_node_allocs(&self, node_id: NodeId, after_index: u64) -> oneshot::Receiver<u64> {
        let (reply, receiver) = oneshot::channel();
        // Lock order as in `watch`: the notifiers first, so a state
        // published after the read below wakes this watcher.
        let mut notifiers = self.shared().notifiers();
        let now = node_allocs_index(&self.shared().current(), &node_id);
        if now > after_index {
            let _ = reply.send(now);
        } else {
            notifiers.node_watchers.insert(
                node_id,
                NodeWatcher {
                    after: after_index,
                    reply,
                },
            );
        }
        receiver
    }

    /// How many node allocation watchers are parked (for tests and
    /// metrics; closed ones count until they are swept).
    pub fn node_watcher_count(&self) -> usize {
        self.shared().notifiers().node_watchers.len()
    }

    /// Subscribes to applied changes from `from_index` on (buffered ones
    /// first).
    pub fn subscribe(&self, from_index: u64) -> Subscription {
        let shared = self.shared();
        let (sender, receiver) = async_mpsc::channel(shared.options.subscriber_capacity);
        let mut notifiers = shared.notifiers();
        let backlog = notifiers.events.since(from_index);
        let oldest = notifiers.events.oldest_index();
        let latest = shared.current().latest_index();
        let missed = match oldest {
            Some(oldest) => from_index < oldest,
            None => from_index <= latest && latest > 0,
        };
        notifiers.subscribers.push(sender);
        Subscription {
            backlog,
            missed,
            receiver,
        }
    }

    /// Applies everything queued, flushes, and stops the writer. Later
    /// commands are answered with `StoreError::Closed`.
    pub fn close(&self) {
        self.handle.close();
    }

    /// Whether `close` has been called: no further command is accepted.
    pub fn is_closed(&self) -> bool {
        self.handle
            .sender
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_none()
    }
}

fn max_index(state: &StateSnapshot, tables: TableSet) -> u64 {
    tables
        .iter()
        .map(|t| state.table_index(t))
        .max()
        .unwrap_or(0)
}

/// Frees replaced states on its own thread. Dropping a state frees every
/// tree node only it used (several per changed row), which took about a
/// third of the writer's time with large tables; off the writer thread it
/// overlaps with the next batch and its fsync. A bounded queue keeps
/// memory in check: when the reclaimer falls behind, the writer waits.
struct Reclaimer {
    sender: Option<mpsc::SyncSender<StateSnapshot>>,
    thread: Option<JoinHandle<()>>,
}

impl Reclaimer {
    fn start() -> Self {
        let (sender, receiver) = mpsc::sync_channel::<StateSnapshot>(4);
        let thread = std::thread::Builder::new()
            .name("herder-state-reclaim".into())
            .spawn(move || receiver.into_iter().for_each(drop));
        match thread {
            Ok(thread) => Reclaimer {
                sender: Some(sender),
                thread: Some(thread),
            },
            // Without the thread, states are simply freed on the writer.
            Err(_) => Reclaimer {
                sender: None,
                thread: None,
            },
        }
    }

    fn reclaim(&self, state: StateSnapshot) {
        if let Some(sender) = &self.sender {
            // A send error hands the state back; it is dropped here.
            let _ = sender.send(state);
        }
    }
}

impl Drop for Reclaimer {
    fn drop(&mut self) {
        self.sender = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The first stage: applies commands to its own copy of the state, which
/// runs ahead of the published (durable) one by what is being flushed.
struct Writer {
    shared: Arc<Shared>,
    state: StateSnapshot,
    disk: Option<Disk>,
    /// Whether groups are persisted (and so must be encoded).
    durable: bool,
}

/// One group of commands, applied and waiting to be made durable.
struct AppliedGroup {
    /// The state after the group.
    state: StateSnapshot,
    /// The group's changed rows as bytes (`None` for a store without
    /// disk), or why they could not be encoded.
    encoded: Option<Result<wal::EncodedRows, StoreError>>,
    /// Each request's reply with its outcome, in order.
    replies: Vec<Answer>,
    /// Whether a batch moved the state's index or stored position: the
    /// group must then be persisted even when no row changed.
    moves_position: bool,
}

/// What the writer hands the persister, in order.
enum Stage {
    Group(AppliedGroup),
    Import(Import),
}

impl Writer {
    fn run(mut self, receiver: mpsc::Receiver<Request>) {
        // Bounded: when the disk falls behind, the writer waits instead of
        // applying (and holding) without limit.
        let (to_persister, from_writer) = mpsc::sync_channel::<Stage>(8);
        let persister = Persister {
            shared: self.shared.clone(),
            disk: self.disk.take(),
            record: Vec::new(),
            reclaimer: Reclaimer::start(),
            checkpointer: None,
        };
        let persister = std::thread::Builder::new()
            .name("herder-state-persist".into())
            .spawn(move || persister.run(from_writer));
        let persister = match persister {
            Ok(thread) => thread,
            Err(e) => {
                tracing::error!(error = %e, "cannot start the state persister thread");
                return;
            }
        };
        while let Ok(first) = receiver.recv() {
            let mut batch = vec![first];
            while batch.len() < self.shared.options.max_batch {
                match receiver.try_recv() {
                    Ok(request) => batch.push(request),
                    Err(_) => break,
                }
            }
            if let Some(reason) = self.shared.failure() {
                for request in batch {
                    request.fail(StoreError::Failed(reason.clone()));
                }
                continue;
            }
            if batch.iter().any(|r| matches!(r, Request::Import(_))) {
                self.apply_with_imports(batch, &to_persister);
                continue;
            }
            send_stage(&to_persister, Stage::Group(self.apply(batch)));
        }
        // Every caller is gone: let the persister finish what it has.
        drop(to_persister);
        if persister.join().is_err() {
            tracing::error!("the state persister thread panicked");
        }
        self.shared.notifiers().subscribers.clear();
    }

    fn apply(&mut self, batch: Vec<Request>) -> AppliedGroup {
        let mut replies = Vec::with_capacity(batch.len());
        let mut moves_position = false;
        let mut staged = Vec::new();
        for request in batch {
            match request {
                Request::One {
                    command,
                    reply,
                    applied,
                } => {
                    let index = self.state.latest_index() + 1;
                    let result = self.state.apply_owned(index, command).map(Arc::new);
                    if let (Some(applied), true) = (applied, result.is_ok()) {
                        staged.push(applied);
                    }
                    replies.push(Answer::One(reply, result));
                }
                Request::Batch {
                    index,
                    commands,
                    position,
                    reply,
                } => {
                    let results = match self.state.apply_batch(index, commands) {
                        Ok(results) => {
                            self.state.set_applied_position(&position);
                            moves_position = true;
                            results.into_iter().map(|r| r.map(Arc::new)).collect()
                        }
                        // A replay: already in the state.
                        Err(_) => Vec::new(),
                    };
                    replies.push(Answer::Batch(reply, results));
                }
                Request::Import(import) => {
                    // `run` hands imports to `apply_with_imports`.
                    let _ = import.reply.send(Err(StoreError::Failed(
                        "an import reached the command path".into(),
                    )));
                }
            }
        }
        // Before encoding: the applier checks its next plan meanwhile.
        for applied in staged {
            let _ = applied.send(self.state.clone());
        }
        let encoded = self.durable.then(|| {
            let changes = replies
                .iter()
                .flat_map(|a| a.results())
                .filter_map(|r| r.as_ref().ok())
                .flat_map(|c| c.changes.iter());
            persist::encode_changes(changes, &self.state)
        });
        AppliedGroup {
            state: self.state.clone(),
            encoded,
            replies,
            moves_position,
        }
    }

    /// Applies a batch holding imports: the requests before each import
    /// as a group, then the import (which the persister carries out in
    /// that order), then the rest over the imported state.
    fn apply_with_imports(&mut self, batch: Vec<Request>, to_persister: &mpsc::SyncSender<Stage>) {
        let mut pending = Vec::new();
        for request in batch {
            let Request::Import(mut import) = request else {
                pending.push(request);
                continue;
            };
            if !pending.is_empty() {
                let group = self.apply(std::mem::take(&mut pending));
                send_stage(to_persister, Stage::Group(group));
            }
            if let Err(e) = self.place(&mut import) {
                let _ = import.reply.send(Err(e));
                continue;
            }
            self.state = import.state.clone();
            send_stage(to_persister, Stage::Import(import));
        }
        if !pending.is_empty() {
            send_stage(to_persister, Stage::Group(self.apply(pending)));
        }
    }
}

impl Writer {
    /// Moves an import to the index it lands at (see [`ImportAt`]), or
    /// says why it may not replace the state.
    fn place(&self, import: &mut Import) -> Result<(), StoreError> {
        let (index, latest) = (import.state.latest_index(), self.state.latest_index());
        match std::mem::replace(&mut import.at, ImportAt::Own) {
            ImportAt::NextIndex => {
                import.restamp(index.max(latest) + 1, self.state.applied_position())
            }
            ImportAt::Exactly { index, position } if index > latest => {
                import.restamp(index, Some(&position))
            }
            ImportAt::Exactly { index, .. } => Err(StoreError::ImportBehind { index, latest }),
            ImportAt::Own if index <= latest && latest > 0 => {
                Err(StoreError::ImportBehind { index, latest })
            }
            ImportAt::Own => Ok(()),
        }
    }
}

/// Hands a stage to the persister, failing its callers if it stopped.
fn send_stage(to_persister: &mpsc::SyncSender<Stage>, stage: Stage) {
    if let Err(unsent) = to_persister.send(stage) {
        match unsent.0 {
            Stage::Group(group) => fail_all(group.replies, "the persister stopped"),
            Stage::Import(import) => {
                let error = StoreError::Failed("the persister stopped".into());
                let _ = import.reply.send(Err(error));
            }
        }
    }
}

fn fail_all(replies: impl IntoIterator<Item = Answer>, reason: &str) {
    for answer in replies {
        answer.fail(reason);
    }
}

/// Where a durable store keeps its state: the log commits append to, and
/// sled, the checkpoint closed log segments are folded into.
struct Disk {
    /// The data dir (sled's and the log's).
    dir: PathBuf,
    log: WalWriter,
    db: sled::Db,
    /// Closed segments not yet handed to the checkpointer.
    closed: Vec<ClosedSegment>,
}

/// The second stage: makes applied groups durable, then visible.
struct Persister {
    shared: Arc<Shared>,
    disk: Option<Disk>,
    /// The log record being written, reused from commit to commit.
    record: Vec<u8>,
    reclaimer: Reclaimer,
    /// Folds closed segments into sled (a durable store's, while running).
    checkpointer: Option<Checkpointer>,
}

impl Persister {
    fn run(mut self, receiver: mpsc::Receiver<Stage>) {
        self.checkpointer = self
            .disk
            .as_ref()
            .map(|d| Checkpointer::start(d.db.clone()));
        while let Ok(first) = receiver.recv() {
            // Everything applied while the previous flush ran goes into
            // this one write; an import is carried out in its place.
            let mut groups = Vec::new();
            let mut next = Some(first);
            while let Some(stage) = next {
                match stage {
                    Stage::Group(group) => groups.push(group),
                    Stage::Import(import) => {
                        if !groups.is_empty() {
                            self.commit(std::mem::take(&mut groups));
                        }
                        self.import(import);
                    }
                }
                next = receiver.try_recv().ok();
            }
            if !groups.is_empty() {
                self.commit(groups);
            }
            self.hand_over_closed_segments();
        }
        if let Some(checkpointer) = self.checkpointer.take() {
            checkpointer.stop();
        }
    }

    /// Once closed segments add up to the checkpoint size, the
    /// checkpointer folds them into sled (in order, off the commit path).
    fn hand_over_closed_segments(&mut self) {
        let (Some(disk), Some(checkpointer)) = (&mut self.disk, &self.checkpointer) else {
            return;
        };
        let closed: u64 = disk.closed.iter().map(|s| s.bytes).sum();
        if !disk.closed.is_empty() && closed >= self.shared.options.checkpoint_bytes {
            checkpointer.fold(std::mem::take(&mut disk.closed));
        }
    }

    /// Writes and flushes the groups' changes at once, publishes the newest
    /// state, and answers every caller.
    fn commit(&mut self, groups: Vec<AppliedGroup>) {
        if let Some(reason) = self.shared.failure() {
            fail_all(groups.into_iter().flat_map(|g| g.replies), &reason);
            return;
        }
        let applied: Vec<Arc<AppliedChanges>> = groups
            .iter()
            .flat_map(|g| g.replies.iter())
            .flat_map(|answer| answer.results())
            .filter_map(|result| result.as_ref().ok())
            .cloned()
            .collect();
        let Some(newest) = groups.last().map(|g| g.state.clone()) else {
            return;
        };
        if !applied.is_empty() || groups.iter().any(|g| g.moves_position) {
            if let Err(e) = self.persist(&groups) {
                let reason = e.to_string();
                tracing::error!(error = %reason, "the state store could not write; refusing further writes");
                *self.shared.failed.lock().unwrap_or_else(|e| e.into_inner()) =
                    Some(reason.clone());
                fail_all(groups.into_iter().flat_map(|g| g.replies), &reason);
                return;
            }
            self.publish(newest, &applied);
        }
        for answer in groups.into_iter().flat_map(|g| g.replies) {
            answer.send();
        }
    }

    /// Replaces the state by an imported one: on disk first (sled's rows
    /// and meta row in one batch, then the log, whose records are all at
    /// lower indexes, emptied), then in memory, then the callers.
    fn import(&mut self, import: Import) {
        if let Some(reason) = self.shared.failure() {
            let _ = import.reply.send(Err(StoreError::Failed(reason)));
            return;
        }
        if let Err(e) = self.replace_on_disk(&import.rows) {
            let reason = e.to_string();
            tracing::error!(error = %reason, "the state store could not write an imported checkpoint; refusing further writes");
            *self.shared.failed.lock().unwrap_or_else(|e| e.into_inner()) = Some(reason);
            let _ = import.reply.send(Err(e));
            return;
        }
        let index = import.state.latest_index();
        self.publish_import(import.state);
        let _ = import.reply.send(Ok(index));
    }

    fn replace_on_disk(&mut self, rows: &wal::EncodedRows) -> Result<(), StoreError> {
        let Some(disk) = &mut self.disk else {
            return Ok(());
        };
        // A fold in progress (or queued) would write older rows over the
        // imported ones: let it finish first.
        if let Some(checkpointer) = self.checkpointer.take() {
            checkpointer.stop();
        }
        persist::replace_all(&disk.db, rows)?;
        // Crash here: the log's records are all at or below the old
        // index, below the imported one, so the next open skips them.
        disk.closed.clear();
        disk.log.restart_empty()?;
        self.checkpointer = Some(Checkpointer::start(disk.db.clone()));
        Ok(())
    }

    /// Publishes an imported state: every waiter is re-checked against
    /// it, and the change feed starts over (see `import_checkpoint`).
    fn publish_import(&self, state: StateSnapshot) {
        let previous = std::mem::replace(&mut *self.shared.current(), state.clone());
        self.shared.changed.notify_all();
        self.reclaimer.reclaim(previous);
        let mut notifiers = self.shared.notifiers();
        let watched: Vec<NodeId> = notifiers.node_watchers.by_node.keys().copied().collect();
        for node_id in &watched {
            notifiers.node_watchers.wake(node_id, &state);
        }
        wake_watchers(&mut notifiers, &state);
        notifiers.events.clear();
        // Ending their streams makes followers subscribe again; with the
        // buffer empty they are told they missed changes, and resync.
        notifiers.subscribers.clear();
    }

    fn persist(&mut self, groups: &[AppliedGroup]) -> Result<(), StoreError> {
        let Some(disk) = &mut self.disk else {
            return Ok(());
        };
        let mut encoded = Vec::with_capacity(groups.len());
        for group in groups {
            match &group.encoded {
                Some(Ok(rows)) => encoded.push(rows),
                Some(Err(e)) => return Err(StoreError::Failed(e.to_string())),
                None => {
                    return Err(StoreError::Failed(
                        "a group reached the disk without its rows".into(),
                    ))
                }
            }
        }
        wal::encode_record(&mut self.record, &encoded);
        if let Some(closed) = disk.log.append(&self.record)? {
            disk.closed.push(closed);
        }
        // A commit of a million rows must not keep its buffer for good.
        if self.record.capacity() > 16 << 20 {
            self.record = Vec::new();
        }
        Ok(())
    }

    fn publish(&self, state: StateSnapshot, applied: &[Arc<AppliedChanges>]) {
        let previous = std::mem::replace(&mut *self.shared.current(), state.clone());
        self.shared.changed.notify_all();
        let touched = touched_nodes(applied, &previous);
        self.reclaimer.reclaim(previous);
        let mut notifiers = self.shared.notifiers();
        for node_id in &touched {
            notifiers.node_watchers.wake(node_id, &state);
        }
        wake_watchers(&mut notifiers, &state);
        for changes in applied {
            notifiers.events.push(changes.clone(), &self.shared.options);
            // A subscriber that cannot keep up is dropped rather than
            // buffered without bound; it may resubscribe from its index.
            notifiers
                .subscribers
                .retain_mut(|s| s.try_send(changes.clone()).is_ok());
        }
    }
}

/// Answers the table watchers whose tables moved past their index.
fn wake_watchers(notifiers: &mut Notifiers, state: &StateSnapshot) {
    notifiers.watchers.retain_mut(|w| {
        if w.reply.is_canceled() {
            return false;
        }
        let now = max_index(state, w.tables);
        if now > w.after {
            let (done, _) = oneshot::channel();
            let reply = std::mem::replace(&mut w.reply, done);
            let _ = reply.send(now);
            return false;
        }
        true
    });
}

/// Folds closed log segments into sled on its own thread, so a checkpoint
/// never holds up a commit. Segments arrive in order and are folded in
/// order. A failure is logged and ends checkpointing, not the store: the
/// log still holds every commit (the next open replays it), it only grows
/// until the operator sees the error and restarts.
struct Checkpointer {
    sender: mpsc::Sender<Vec<ClosedSegment>>,
    thread: Option<JoinHandle<()>>,
}

impl Checkpointer {
    fn start(db: sled::Db) -> Self {
        let (sender, receiver) = mpsc::channel::<Vec<ClosedSegment>>();
        let thread = std::thread::Builder::new()
            .name("herder-state-checkpoint".into())
            .spawn(move || {
                for segments in receiver {
                    let started = Instant::now();
                    match persist::checkpoint(&db, &segments) {
                        Ok(()) => tracing::info!(
                            segments = segments.len(),
                            seconds = started.elapsed().as_secs_f64(),
                            "state log checkpointed into sled"
                        ),
                        Err(e) => {
                            tracing::error!(error = %e, "checkpointing the state log failed; the log keeps everything");
                            return;
                        }
                    }
                }
            });
        match thread {
            Ok(thread) => Checkpointer {
                sender,
                thread: Some(thread),
            },
            Err(e) => {
                tracing::error!(error = %e, "cannot start the state checkpoint thread; the log will keep growing");
                Checkpointer {
                    sender,
                    thread: None,
                }
            }
        }
    }

    fn fold(&self, segments: Vec<ClosedSegment>) {
        let _ = self.sender.send(segments);
    }

    /// Lets a checkpoint in progress finish (it leaves sled consistent
    /// either way, but a finished one saves the next open a replay).
    fn stop(mut self) {
        drop(self.sender);
        if let Some(thread) = self.thread.take() {
            if thread.join().is_err() {
                tracing::error!("the state checkpoint thread panicked");
            }
        }
    }
}
