//! The Raft log, the vote and the committed position on sled.
//!
//! One sled database of its own (`<data dir>/raft`), apart from the state
//! store's, with two trees: `log` (key: the log index big-endian, so key
//! order is index order; value: the openraft entry as JSON, the encoding
//! the commands are tested with) and `meta` (the vote, the committed log
//! id, the last purged log id). Every change is flushed to disk before it
//! is reported done: openraft counts a follower's acknowledgement as a
//! durable copy, and a vote forgotten by a crash allows two leaders in one
//! term.

use crate::{NodeId, TypeConfig};
use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{Entry, LogId, LogState, RaftLogReader, StorageError, StorageIOError, Vote};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::path::Path;

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
}

impl SledLogStore {
    /// Opens (or creates) the log database in `dir`.
    pub fn open(dir: impl AsRef<Path>) -> Result<SledLogStore, sled::Error> {
        let db = sled::Config::new().path(dir.as_ref()).open()?;
        let log = db.open_tree(LOG_TREE)?;
        let meta = db.open_tree(META_TREE)?;
        Ok(SledLogStore { db, log, meta })
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
        let last_log_id = self.last_entry_log_id()?.or(last_purged_log_id);
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

    async fn save_committed(&mut self, committed: Option<LogId<NodeId>>) -> StoreResult<()> {
        Ok(self.write_meta(COMMITTED_KEY, &committed).await?)
    }

    async fn read_committed(&mut self) -> StoreResult<Option<LogId<NodeId>>> {
        Ok(self
            .read_meta::<Option<LogId<NodeId>>>(COMMITTED_KEY)?
            .flatten())
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
        let written = match self.log.apply_batch(batch) {
            Ok(()) => self.flush().await,
            Err(e) => Err(e),
        };
        match written {
            Ok(()) => {
                callback.log_io_completed(Ok(()));
                Ok(())
            }
            Err(e) => {
                let error = StorageIOError::write_logs(&e);
                callback.log_io_completed(Err(std::io::Error::other(e.to_string())));
                Err(error.into())
            }
        }
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
