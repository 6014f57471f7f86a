//! What the compiler is doing right now, for the report of an internal error.
//!
//! The pass manager enters `pass `NAME``, the runtimes enter `launch `KERNEL` (FILE:LINE:COL)`.
//! When a panic escapes, the driver's safety net names the innermost activity of the thread that
//! ran the command ("internal error while running pass `canonicalize`"), so a bug report says
//! where to look even without a backtrace. Work spawned on other threads (the JIT's chunks) runs
//! inside the activity its caller entered.

use std::cell::RefCell;

thread_local! {
    static STACK: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
}

/// Leaves the activity when dropped (also while a panic unwinds past it, so the stack stays
/// balanced for the code that catches the panic; [`current`] is read before unwinding ends).
#[derive(Debug)]
#[must_use = "the activity lasts as long as the guard"]
pub struct Activity {
    _private: (),
}

/// Enters an activity described by `what` until the returned guard is dropped.
pub fn enter(what: impl Into<String>) -> Activity {
    let what = what.into();
    STACK.with(|s| s.borrow_mut().push(what));
    Activity { _private: () }
}

impl Drop for Activity {
    fn drop(&mut self) {
        // While a panic unwinds, keep the entry: the safety net reads it after unwinding.
        if !std::thread::panicking() {
            STACK.with(|s| {
                s.borrow_mut().pop();
            });
        }
    }
}

/// The innermost activity of this thread, if any.
pub fn current() -> Option<String> {
    STACK.with(|s| s.borrow().last().cloned())
}

/// Forgets every activity of this thread (after a panic was reported).
pub fn clear() {
    STACK.with(|s| s.borrow_mut().clear());
}

#[cfg(test)]
mod tests {
    use super::{clear, current, enter};

    #[test]
    fn nested_activities_and_panics() {
        assert_eq!(current(), None);
        {
            let _p = enter("pass `a`");
            {
                let _l = enter("launch `k`");
                assert_eq!(current().as_deref(), Some("launch `k`"));
            }
            assert_eq!(current().as_deref(), Some("pass `a`"));
        }
        assert_eq!(current(), None);
        let r = std::panic::catch_unwind(|| {
            let _p = enter("pass `b`");
            panic!("boom");
        });
        assert!(r.is_err());
        assert_eq!(current().as_deref(), Some("pass `b`"));
        clear();
        assert_eq!(current(), None);
    }
}
