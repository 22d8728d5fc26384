//! Counts the SIGINTs it is sent, for the CLI's signal tests (`tests/cli.rs`).
//!
//! ```text
//! signal-counter DIR
//!     installs its handlers, then writes DIR/ready; writes the number of SIGINTs received so
//!     far to DIR/ints whenever it changes; on SIGTERM prints that number and exits 4
//! ```
//!
//! Unlike a shell `trap`, which runs once however many signals arrived meanwhile, the handler
//! counts every delivery.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

static INTS: AtomicUsize = AtomicUsize::new(0);
static TERM: AtomicBool = AtomicBool::new(false);

extern "C" fn on_int(_: libc::c_int) {
    INTS.fetch_add(1, Ordering::SeqCst);
}

extern "C" fn on_term(_: libc::c_int) {
    TERM.store(true, Ordering::SeqCst);
}

fn main() {
    let dir = PathBuf::from(
        std::env::args_os()
            .nth(1)
            .expect("usage: signal-counter DIR"),
    );
    for (signo, handler) in [
        (libc::SIGINT, on_int as extern "C" fn(libc::c_int)),
        (libc::SIGTERM, on_term),
    ] {
        // SAFETY: the handlers only touch atomics, which is async-signal-safe.
        unsafe {
            libc::signal(signo, handler as libc::sighandler_t);
        }
    }
    std::fs::write(dir.join("ready"), "").unwrap();
    let mut reported = 0;
    loop {
        // Read TERM first: every SIGINT delivered before the SIGTERM is then counted below.
        let term = TERM.load(Ordering::SeqCst);
        let ints = INTS.load(Ordering::SeqCst);
        if ints != reported {
            std::fs::write(dir.join("ints"), ints.to_string()).unwrap();
            reported = ints;
        }
        if term {
            println!("{ints}");
            std::process::exit(4);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}
