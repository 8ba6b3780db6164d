//! The plain (non-async) mutex of the local queue, which its model tests can see into.
//!
//! In normal builds this is `std::sync::Mutex`, poisoning ignored (the state it guards is a
//! count, valid after any panic). In test builds, a lock created inside a shuttle model run
//! (`interleavings/`) is shuttle's mutex instead, so the model scheduler can switch tasks
//! at every lock and unlock and so explore the orders in which two threads pass through the
//! queue's critical sections (taking the lock and letting it go are both points where
//! another task may run); created anywhere else it is std's, as in production.

use std::ops::{Deref, DerefMut};

pub(crate) struct Lock<T> {
    inner: Inner<T>,
}

enum Inner<T> {
    Std(std::sync::Mutex<T>),
    #[cfg(test)]
    Model(shuttle::sync::Mutex<T>),
}

pub(crate) enum Guard<'a, T> {
    Std(std::sync::MutexGuard<'a, T>),
    /// `None` only while dropping.
    #[cfg(test)]
    Model(Option<shuttle::sync::MutexGuard<'a, T>>),
}

/// Under the model, letting go of the lock is a point where another thread may run (taking
/// it is one already): the model then also explores what others do between this section and
/// the caller's next step.
#[cfg(test)]
impl<T> Drop for Guard<'_, T> {
    fn drop(&mut self) {
        if let Guard::Model(guard) = self {
            drop(guard.take());
            shuttle::thread::yield_now();
        }
    }
}

impl<T> Lock<T> {
    pub fn new(value: T) -> Lock<T> {
        #[cfg(test)]
        if shuttle::current::try_get_current_task().is_some() {
            return Lock {
                inner: Inner::Model(shuttle::sync::Mutex::new(value)),
            };
        }
        Lock {
            inner: Inner::Std(std::sync::Mutex::new(value)),
        }
    }

    pub fn lock(&self) -> Guard<'_, T> {
        match &self.inner {
            Inner::Std(lock) => Guard::Std(lock.lock().unwrap_or_else(|e| e.into_inner())),
            #[cfg(test)]
            Inner::Model(lock) => Guard::Model(Some(lock.lock().unwrap_or_else(|e| e.into_inner()))),
        }
    }
}

impl<T: Default> Default for Lock<T> {
    fn default() -> Self {
        Lock::new(T::default())
    }
}

impl<T> Deref for Guard<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        match self {
            Guard::Std(guard) => guard,
            #[cfg(test)]
            Guard::Model(guard) => guard.as_ref().expect("held until dropped"),
        }
    }
}

impl<T> DerefMut for Guard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        match self {
            Guard::Std(guard) => guard,
            #[cfg(test)]
            Guard::Model(guard) => guard.as_mut().expect("held until dropped"),
        }
    }
}
