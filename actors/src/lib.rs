//! herder's running service.
