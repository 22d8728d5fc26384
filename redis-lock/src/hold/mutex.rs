//! The mutex to the layers above the deployment: the table's constructor and its `Lock`
//! rules (it takes every option). Its operations on one store are `wire::mutex`'s.

use std::sync::{Arc, LazyLock};

use super::Kind;
use super::primitive::{Lock, Params};
use crate::error::Result;
use crate::options::LockOptions;
pub(crate) use crate::wire::mutex::Mutex;

/// The mutex (the table's constructor): one shared instance, since it has no state, so that
/// a `lock` call allocates nothing for it.
pub(crate) fn make(_: Params) -> Arc<dyn Lock> {
    static MUTEX: LazyLock<Arc<dyn Lock>> = LazyLock::new(|| Arc::new(Mutex));
    Arc::clone(&MUTEX)
}

impl Lock for Mutex {
    fn kind(&self) -> Kind {
        Kind::Mutex
    }

    /// The mutex takes every option.
    fn check(&self, _opts: &LockOptions, _fair: bool) -> Result<()> {
        Ok(())
    }

    fn holder_fence(&self) -> bool {
        true
    }
}
