//! Upgrade steps of herder's on-disk format.
