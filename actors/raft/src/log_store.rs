//! The Raft log, the vote and the committed position on sled.
//!
//! One sled database of its own (`<data dir>/raft`), apart from the state
//! store's, with two trees: `log` (key: the log index big-endian, so key
//! order is index order; value: the openraft entry as JSON, the encoding
//! the commands are tested with) and `meta` (the vote, the committed log
//! id, the last purged log id). Appended entries and the vote are flushed
//! to disk before they are reported done: openraft counts a follower's
//! acknowledgement as a durable copy, and a vote forgotten by a crash
//! allows two leaders in one term.
//!
//! Appends are flushed by a `GroupFlusher` off openraft's core task: the
//! core hands the entries over and goes on (answering votes and
//! heartbeats) while the disk syncs, and every append waiting meanwhile
//! shares the next sync. An append that held the core for its own fsync
//! left votes queued behind a busy disk: a follower took seconds to answer
//! one, and failovers under load took a second and third election round.

use crate::{NodeId, TypeConfig};
use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{Entry, LogId, LogState, RaftLogReader, StorageError, StorageIOError, Vote};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::path::Path;
use std::sync::{Arc, Mutex};

const LOG_TREE: &str = "log";
const META_TREE: &str = "meta";
const VOTE_KEY: &str = "vote";
const COMMITTED_KEY: &str = "committed";
const LAST_PURGED_KEY: &str = "last_purged";

type StoreResult<T> = Result<T, StorageError<NodeId>>;

/// The sled-backed log store. Cheap to clone: clones share the database
/// (openraft reads the log through a clone while the owner appends).
#[derive(Clone)]
pub struct SledLogStore {
    db: sled::Db,
    log: sled::Tree,
    meta: sled::Tree,
    flusher: GroupFlusher,
}

/// Syncs the database for appends in the order they came, one sync for
/// all that are waiting. At most one flush task runs at a time, so the
/// callbacks complete in append order (openraft takes each as "durable up
/// to this entry").
#[derive(Clone)]
struct GroupFlusher {
    db: sled::Db,
    queue: Arc<Mutex<FlushQueue>>,
}

/// What to do once an append is on disk (or could not be put there).
type WhenFlushed = Box<dyn FnOnce(std::io::Result<()>) + Send>;

#[derive(Default)]
struct FlushQueue {
    waiting: Vec<WhenFlushed>,
    /// Whether a flush task is running (it takes `waiting` until empty).
    running: bool,
}

impl GroupFlusher {
    fn new(db: sled::Db) -> GroupFlusher {
        GroupFlusher {
            db,
            queue: Arc::default(),
        }
    }

    /// Reports `callback` done once everything written so far is on disk.
    fn after_next_flush(&self, callback: WhenFlushed) {
        let start = {
            let mut queue = self.queue.lock().unwrap_or_else(|p| p.into_inner());
            queue.waiting.push(callback);
            !std::mem::replace(&mut queue.running, true)
        };
        if start {
            tokio::spawn(self.clone().run());
        }
    }

    async fn run(self) {
        loop {
            let batch = {
                let mut queue = self.queue.lock().unwrap_or_else(|p| p.into_inner());
                if queue.waiting.is_empty() {
                    queue.running = false;
                    return;
                }
                std::mem::take(&mut queue.waiting)
            };
            let flushed = self.db.flush_async().await;
            for callback in batch {
                callback(match &flushed {
                    Ok(_) => Ok(()),
                    Err(e) => Err(std::io::Error::other(e.to_string())),
                });
            }
        }
    }
}

impl SledLogStore {
    /// Opens (or creates) the log database in `dir`.
    pub fn open(dir: impl AsRef<Path>) -> Result<SledLogStore, sled::Error> {
        // A log of this process closed a moment ago may not have let go yet.
        herder::state::sled_lock::wait_until_unlocked(
            dir.as_ref(),
            herder::state::sled_lock::RELEASE_WAIT,
        );
        let db = sled::Config::new().path(dir.as_ref()).open()?;
        let log = db.open_tree(LOG_TREE)?;
        let meta = db.open_tree(META_TREE)?;
        let flusher = GroupFlusher::new(db.clone());
        Ok(SledLogStore {
            db,
            log,
            meta,
            flusher,
        })
    }

    async fn flush(&self) -> Result<(), sled::Error> {
        self.db.flush_async().await.map(|_| ())
    }

    fn read_meta<T: DeserializeOwned>(
        &self,
        key: &str,
    ) -> Result<Option<T>, StorageIOError<NodeId>> {
        let Some(bytes) = self.meta.get(key).map_err(|e| StorageIOError::read(&e))? else {
            return Ok(None);
        };
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| StorageIOError::read(&e))
    }

    async fn write_meta<T: Serialize>(
        &self,
        key: &str,
        value: &T,
    ) -> Result<(), StorageIOError<NodeId>> {
        let bytes = serde_json::to_vec(value).map_err(|e| StorageIOError::write(&e))?;
        self.meta
            .insert(key, bytes)
            .map_err(|e| StorageIOError::write(&e))?;
        self.flush().await.map_err(|e| StorageIOError::write(&e))
    }

    /// The id of the last entry, or the purge mark when the log holds
    /// none (what openraft's `get_log_state` calls the last log id).
    pub fn last_log_id(&self) -> Result<Option<LogId<NodeId>>, StorageIOError<NodeId>> {
        let last_purged: Option<LogId<NodeId>> = self.read_meta(LAST_PURGED_KEY)?;
        Ok(self.last_entry_log_id()?.or(last_purged))
    }

    fn last_entry_log_id(&self) -> Result<Option<LogId<NodeId>>, StorageIOError<NodeId>> {
        let Some((_, bytes)) = self.log.last().map_err(|e| StorageIOError::read_logs(&e))? else {
            return Ok(None);
        };
        let entry: Entry<TypeConfig> =
            serde_json::from_slice(&bytes).map_err(|e| StorageIOError::read_logs(&e))?;
        Ok(Some(entry.log_id))
    }

    /// Removes the entries whose indexes are in `range` and flushes.
    async fn remove_range(
        &self,
        range: (Bound<[u8; 8]>, Bound<[u8; 8]>),
    ) -> Result<(), StorageIOError<NodeId>> {
        let mut batch = sled::Batch::default();
        for item in self.log.range(range) {
            let (key, _) = item.map_err(|e| StorageIOError::write_logs(&e))?;
            batch.remove(key);
        }
        self.log
            .apply_batch(batch)
            .map_err(|e| StorageIOError::write_logs(&e))?;
        self.flush()
            .await
            .map_err(|e| StorageIOError::write_logs(&e))
    }
}

fn index_key(index: u64) -> [u8; 8] {
    index.to_be_bytes()
}

fn key_bounds<RB: RangeBounds<u64>>(range: &RB) -> (Bound<[u8; 8]>, Bound<[u8; 8]>) {
    let map = |bound: Bound<&u64>| match bound {
        Bound::Included(i) => Bound::Included(index_key(*i)),
        Bound::Excluded(i) => Bound::Excluded(index_key(*i)),
        Bound::Unbounded => Bound::Unbounded,
    };
    (map(range.start_bound()), map(range.end_bound()))
}

impl RaftLogReader<TypeConfig> for SledLogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> StoreResult<Vec<Entry<TypeConfig>>> {
        let mut entries = Vec::new();
        for item in self.log.range(key_bounds(&range)) {
            let (_, bytes) = item.map_err(|e| StorageIOError::read_logs(&e))?;
            let entry =
                serde_json::from_slice(&bytes).map_err(|e| StorageIOError::read_logs(&e))?;
            entries.push(entry);
        }
        Ok(entries)
    }
}

impl RaftLogStorage<TypeConfig> for SledLogStore {
    type LogReader = SledLogStore;

    async fn get_log_state(&mut self) -> StoreResult<LogState<TypeConfig>> {
        let last_purged_log_id: Option<LogId<NodeId>> = self.read_meta(LAST_PURGED_KEY)?;
        let last_log_id = self.last_log_id()?;
        Ok(LogState {
            last_purged_log_id,
            last_log_id,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> StoreResult<()> {
        Ok(self.write_meta(VOTE_KEY, vote).await?)
    }

    async fn read_vote(&mut self) -> StoreResult<Option<Vote<NodeId>>> {
        Ok(self.read_meta(VOTE_KEY)?)
    }

    /// Not flushed on its own: the committed position only saves
    /// re-applying entries after a restart, and it reaches the disk with
    /// the next append's flush. [`Self::read_committed`] answers it only
    /// when the log still holds what it names.
    async fn save_committed(&mut self, committed: Option<LogId<NodeId>>) -> StoreResult<()> {
        let bytes = serde_json::to_vec(&committed).map_err(|e| StorageIOError::write(&e))?;
        self.meta
            .insert(COMMITTED_KEY, bytes)
            .map_err(|e| StorageIOError::write(&e))?;
        Ok(())
    }

    /// The saved committed position, unless a crash kept it and lost the
    /// entries it names (it is written without a flush of its own): then
    /// none, and openraft learns the position from the leader again.
    async fn read_committed(&mut self) -> StoreResult<Option<LogId<NodeId>>> {
        let Some(committed) = self
            .read_meta::<Option<LogId<NodeId>>>(COMMITTED_KEY)?
            .flatten()
        else {
            return Ok(None);
        };
        let purged: Option<LogId<NodeId>> = self.read_meta(LAST_PURGED_KEY)?;
        if purged.is_some_and(|p| p.index >= committed.index) {
            return Ok(Some(committed));
        }
        let stored = self
            .log
            .get(index_key(committed.index))
            .map_err(|e| StorageIOError::read_logs(&e))?;
        let Some(bytes) = stored else {
            return Ok(None);
        };
        let entry: Entry<TypeConfig> =
            serde_json::from_slice(&bytes).map_err(|e| StorageIOError::read_logs(&e))?;
        Ok((entry.log_id == committed).then_some(committed))
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> StoreResult<()>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + Send,
        I::IntoIter: Send,
    {
        let mut batch = sled::Batch::default();
        for entry in entries {
            let bytes = serde_json::to_vec(&entry).map_err(|e| StorageIOError::write_logs(&e))?;
            batch.insert(&index_key(entry.log_id.index), bytes);
        }
        if let Err(e) = self.log.apply_batch(batch) {
            callback.log_io_completed(Err(std::io::Error::other(e.to_string())));
            return Err(StorageIOError::write_logs(&e).into());
        }
        self.flusher
            .after_next_flush(Box::new(move |result| callback.log_io_completed(result)));
        Ok(())
    }

    async fn truncate(&mut self, log_id: LogId<NodeId>) -> StoreResult<()> {
        let from = (Bound::Included(index_key(log_id.index)), Bound::Unbounded);
        Ok(self.remove_range(from).await?)
    }

    async fn purge(&mut self, log_id: LogId<NodeId>) -> StoreResult<()> {
        // The purge mark first: a crash between the two steps then leaves
        // entries at or below the mark, which openraft never reads and the
        // next purge removes; never a gap that the log state hides.
        self.write_meta(LAST_PURGED_KEY, &log_id).await?;
        let upto = (Bound::Unbounded, Bound::Included(index_key(log_id.index)));
        Ok(self.remove_range(upto).await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Appends handed over back to back (the core does not wait for the
    /// disk) are all reported durable, in the order they came, and after
    /// their data is on disk.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn appends_waiting_for_the_disk_complete_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let db = sled::Config::new().path(dir.path()).open().unwrap();
        let flusher = GroupFlusher::new(db.clone());
        let (done, mut completed) = tokio::sync::mpsc::unbounded_channel();
        for i in 0..200u32 {
            db.insert(i.to_be_bytes(), vec![0u8; 512]).unwrap();
            let done = done.clone();
            flusher.after_next_flush(Box::new(move |r| {
                let _ = done.send((i, r.is_ok()));
            }));
        }
        drop(done);
        let mut order = Vec::new();
        while let Some((i, ok)) = completed.recv().await {
            assert!(ok, "flush {i} failed");
            order.push(i);
        }
        assert_eq!(order, (0..200).collect::<Vec<_>>());
        // The task ends once it finds nothing more to flush.
        for _ in 0..100 {
            if !flusher.queue.lock().unwrap().running {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        panic!("the flush task still runs with nothing to flush");
    }
}
