//! `wakemeter top --pid P`: a live view of a process, refreshed every
//! `--every`, threads sorted by CPU (or switches, wakes, run-queue
//! wait), with the kernel view, probes and current findings.
//!
//! It samples as `watch` does (`crate::session`: the same target
//! resolution, sampler, thresholds and exit checks). Three threads feed
//! one channel, so that nothing waits on anything else: the sampler's
//! snapshots (`wait_for_sample`), the keys (crossterm's blocking read) and
//! SIGTERM/SIGINT/SIGHUP/SIGQUIT (signal-hook). The main thread only
//! receives, draws and decides; it wakes for a snapshot or a key, never on
//! a timer of its own.
//!
//! When stdout is not a terminal (or `TERM=dumb`), it prints the same
//! screen as plain text, one frame per report period, [`PLAIN_WIDTH`] columns
//! wide with the [`PLAIN_THREADS`] busiest threads.
//!
//! The terminal is always given back as it was (raw mode off, the
//! alternate screen left, the cursor shown): on `q`, on an error (a
//! guard's drop), on a panic (a hook that runs before the panic message
//! is printed) and on those signals.

mod render;
mod view;

use std::error::Error;
use std::io::{self, IsTerminal, Stdout, Write};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use ratatui::Terminal;
use ratatui::backend::CrosstermBackend;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use ratatui::crossterm::{cursor, execute, terminal};
use wakemeter::config::DEFAULT_REPORT_THREADS;
use wakemeter::{Interval, Report, SampleWait, Sampler, Target};

use crate::session::{self, End, SAMPLE_EVERY};
use crate::target::Resolved;
use crate::{kernel, print};
use view::{Kernel, SortKey, View};

/// Columns of a plain-text frame.
pub const PLAIN_WIDTH: u16 = 160;
/// Thread rows of a plain-text frame: the busiest ones.
pub const PLAIN_THREADS: usize = 40;

/// What the user asked for.
#[derive(Debug, Clone)]
pub struct Options {
    /// The process (or one of its threads) to watch.
    pub pid: u32,
    /// Time between refreshes.
    pub every: Duration,
    /// Stop after this long.
    pub seconds: Option<Duration>,
    /// Which kernel view to attach (`--no-ebpf`, `--no-syscall-hook`).
    pub kernel: kernel::Choice,
}

/// Accepted report periods (`--every`).
const INTERVALS: std::ops::RangeInclusive<Duration> =
    Duration::from_secs(1)..=Duration::from_secs(60);

/// What woke the main thread.
enum Msg {
    /// The sampler stored snapshot `seq` (and maybe others before it).
    Sample(u64),
    /// No snapshot for a while: time to check the target anyway.
    Tick,
    /// The background sampling ended.
    Stopped,
    Key(KeyEvent),
    Resize,
    Signal(i32),
    /// Reading the keys failed (the terminal went away).
    Input(String),
}

/// Why `top` stops.
enum Stop {
    Session(End),
    Quit,
    Signal(i32),
    Input(String),
}

/// The numbers of one refresh.
struct Data {
    report: Report,
    interval: Option<Interval>,
    /// The snapshot the interval ends at.
    seq: Option<u64>,
}

pub fn run(o: &Options) -> Result<ExitCode, Box<dyn Error>> {
    // Whole seconds, because a refresh ends on a snapshot that has the
    // voluntary/involuntary split of switches, one in every
    // [`session::SWITCH_SPLIT_EVERY`] (a second apart).
    crate::duration::whole_seconds(
        o.every,
        "--every",
        INTERVALS.start().as_secs(),
        INTERVALS.end().as_secs(),
    )?;
    if o.seconds.is_some_and(|s| s.is_zero()) {
        return Err("--seconds must be more than 0".into());
    }
    // Everything that can fail with a message happens before the screen
    // is taken, so a message is never drawn over or lost.
    let target = session::resolve(o.pid)?;
    let pid = target.pid;
    let (source, kernel) = match kernel::attach(Target::Pid(pid), o.kernel) {
        Ok(src) => (Some(src), Kernel::Attached),
        Err(why) => (None, Kernel::Missing(why)),
    };
    let sampler = match session::sampler(pid, o.every, DEFAULT_REPORT_THREADS, source) {
        Ok(s) => s,
        Err(e) => return crate::watch::exited_while_starting(pid, &target.name, e.into()),
    };
    let guard = match sampler.start() {
        Ok(g) => g,
        Err(e) => return crate::watch::exited_while_starting(pid, &target.name, e.into()),
    };
    let interactive =
        io::stdout().is_terminal() && std::env::var_os("TERM").is_none_or(|t| t != "dumb");
    let (tx, rx) = mpsc::channel();
    follow_samples(&sampler, tx.clone());
    let mut top = Top {
        o,
        target: &target,
        kernel,
        sampler: &sampler,
        start: Instant::now(),
        sort: SortKey::Cpu,
        scroll: 0,
        rows: 0,
        notice: None,
        measured: false,
        printed: None,
        data: Data {
            report: sampler.report(),
            interval: None,
            seq: None,
        },
    };
    let stop = if interactive {
        let mut screen = Screen::enter()?;
        follow_signals(tx.clone())?;
        follow_keys(tx);
        top.run(&rx, Some(&mut screen))?
    } else {
        drop(tx);
        top.run(&rx, None)?
    };
    drop(guard);
    match stop {
        Stop::Quit | Stop::Session(End::Deadline) => Ok(ExitCode::SUCCESS),
        Stop::Signal(sig) => Ok(ExitCode::from(128 + (sig & 0x7f) as u8)),
        Stop::Input(why) => Err(format!("reading the keyboard failed: {why}").into()),
        Stop::Session(End::TargetGone(how)) => {
            // The screen is restored: leave the last numbers on the
            // terminal, with what happened.
            let notice = format!(
                "target exited: process {pid} ({}) {}",
                target.name,
                session::how_gone(how)
            );
            top.notice = Some(notice.clone());
            // The screen is given back with the last numbers on it; a
            // plain output already has them, unless a newer interval came.
            if interactive || top.printed != top.data.seq {
                top.print_frame()?;
            }
            print::note(&format!("wakemeter: {notice}"));
            if top.measured {
                Ok(ExitCode::SUCCESS)
            } else {
                print::note("wakemeter: it exited before anything could be measured");
                Ok(ExitCode::FAILURE)
            }
        }
        Stop::Session(End::SamplerStopped(why)) => {
            print::note(&format!("wakemeter: sampling stopped: {why}"));
            Ok(ExitCode::FAILURE)
        }
    }
}

/// A thread that says when the sampler stores a snapshot.
fn follow_samples(sampler: &Sampler, tx: Sender<Msg>) {
    let sampler = sampler.clone();
    std::thread::spawn(move || {
        let mut last = None;
        loop {
            let msg = match sampler.wait_for_sample(last, 2 * SAMPLE_EVERY) {
                SampleWait::Stored { seq } => {
                    last = Some(seq);
                    Msg::Sample(seq)
                }
                SampleWait::Stopped => Msg::Stopped,
                _ => Msg::Tick,
            };
            let stopped = matches!(msg, Msg::Stopped);
            if tx.send(msg).is_err() || stopped {
                break;
            }
        }
    });
}

/// A thread that turns the signals that end a program into messages, so
/// the screen is restored before exiting. (In raw mode Ctrl-C is a key;
/// these come from `kill`, a closed SSH session, or the terminal.)
fn follow_signals(tx: Sender<Msg>) -> io::Result<()> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGQUIT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT, SIGHUP, SIGQUIT])?;
    std::thread::spawn(move || {
        for sig in signals.forever() {
            if tx.send(Msg::Signal(sig)).is_err() {
                break;
            }
        }
    });
    Ok(())
}

/// A thread that reads the keys (blocking: no polling timer).
fn follow_keys(tx: Sender<Msg>) {
    std::thread::spawn(move || {
        loop {
            let msg = match event::read() {
                Ok(Event::Key(k)) if k.kind != KeyEventKind::Release => Msg::Key(k),
                Ok(Event::Resize(..)) => Msg::Resize,
                Ok(_) => continue,
                Err(e) => Msg::Input(e.to_string()),
            };
            let failed = matches!(msg, Msg::Input(_));
            if tx.send(msg).is_err() || failed {
                break;
            }
        }
    });
}

/// The state of one `top` run.
struct Top<'a> {
    o: &'a Options,
    target: &'a Resolved,
    kernel: Kernel,
    sampler: &'a Sampler,
    start: Instant,
    sort: SortKey,
    /// First thread row shown.
    scroll: usize,
    /// Thread rows that fit at the last draw.
    rows: usize,
    /// A line that must be seen (a sampling error, the target's exit).
    notice: Option<String>,
    /// Whether an interval was measured.
    measured: bool,
    /// The snapshot the last plain frame ended at: one interval is
    /// printed once.
    printed: Option<u64>,
    /// What is shown.
    data: Data,
}

impl Top<'_> {
    /// Shows the numbers up to snapshot `seq` (one with the switch split):
    /// the table over the last `--every` before it, the findings and
    /// warnings as `watch` reports them.
    fn refresh(&mut self, seq: u64) {
        let samples = session::samples_in(self.o.every);
        let interval = self
            .sampler
            .interval_between(seq.saturating_sub(samples), seq)
            .or_else(|| self.sampler.interval_over(self.o.every));
        self.measured |= interval.is_some();
        self.data = Data {
            report: self.sampler.report(),
            interval,
            seq: Some(seq),
        };
    }

    fn view(&self) -> View<'_> {
        let data = &self.data;
        let mut v = View::new(
            self.target.pid,
            &self.target.name,
            self.start.elapsed(),
            self.o.every,
            &self.kernel,
            &data.report,
            data.interval.as_ref(),
            self.sort,
        );
        v.notice = self.notice.as_deref();
        v
    }

    fn print_frame(&mut self) -> io::Result<()> {
        self.printed = self.data.seq;
        let mut v = self.view();
        v.interactive = false;
        let mut out = io::stdout().lock();
        writeln!(out, "{}", render::plain(&v, PLAIN_WIDTH, PLAIN_THREADS))?;
        out.flush()
    }

    fn draw(&mut self, screen: &mut Screen) -> io::Result<()> {
        let v = self.view();
        let mut drawn = None;
        screen.terminal.draw(|f| {
            drawn = Some(render::render(&v, self.scroll, f.area(), f.buffer_mut()));
        })?;
        if let Some(d) = drawn {
            self.scroll = d.first;
            self.rows = d.rows;
        }
        Ok(())
    }

    /// Handles a key; `Some` when it ends `top`.
    fn key(&mut self, k: KeyEvent) -> Option<Stop> {
        let page = self.rows.max(1);
        match k.code {
            KeyCode::Char('q') | KeyCode::Esc => return Some(Stop::Quit),
            KeyCode::Char('c') if k.modifiers.contains(KeyModifiers::CONTROL) => {
                return Some(Stop::Quit);
            }
            KeyCode::Char(c) => {
                if let Some(key) = SortKey::for_letter(c) {
                    self.sort = key;
                    self.scroll = 0;
                }
            }
            KeyCode::Tab => {
                self.sort = self.sort.next();
                self.scroll = 0;
            }
            KeyCode::Down => self.scroll = self.scroll.saturating_add(1),
            KeyCode::Up => self.scroll = self.scroll.saturating_sub(1),
            KeyCode::PageDown => self.scroll = self.scroll.saturating_add(page),
            KeyCode::PageUp => self.scroll = self.scroll.saturating_sub(page),
            KeyCode::Home => self.scroll = 0,
            // Clamped to the last full page at the next draw.
            KeyCode::End => self.scroll = usize::MAX,
            _ => {}
        }
        None
    }

    /// Runs until something ends it: draws on `screen`, or prints plain
    /// frames without one.
    fn run(&mut self, rx: &Receiver<Msg>, mut screen: Option<&mut Screen>) -> io::Result<Stop> {
        // Checked: a deadline past the clock's range is no deadline.
        let deadline = self.o.seconds.and_then(|s| self.start.checked_add(s));
        let split = u64::from(session::SWITCH_SPLIT_EVERY);
        let mut next_refresh = self.start;
        // The newest snapshot with the switch split.
        let mut newest = None;
        let mut reported = None;
        if let Some(s) = screen.as_deref_mut() {
            self.draw(s)?;
        }
        loop {
            let wait = deadline.map_or(Duration::MAX, |d| {
                d.saturating_duration_since(Instant::now())
            });
            let msg = match rx.recv_timeout(wait) {
                Ok(m) => m,
                Err(RecvTimeoutError::Timeout) => {
                    // A last frame when there is something newer to say.
                    if screen.is_none()
                        && let Some(seq) = newest.filter(|s| Some(*s) != self.data.seq)
                    {
                        self.refresh(seq);
                        self.print_frame()?;
                    }
                    return Ok(Stop::Session(End::Deadline));
                }
                // The threads that send only stop after saying why.
                Err(RecvTimeoutError::Disconnected) => Msg::Stopped,
            };
            let mut dirty = false;
            match msg {
                Msg::Sample(_) | Msg::Tick | Msg::Stopped => {
                    let mut error = None;
                    if let Some(end) =
                        session::check(self.sampler, self.target.pid, &mut reported, |e| {
                            error = Some(format!("sampling: {e}"));
                        })
                    {
                        return Ok(Stop::Session(end));
                    }
                    if let Some(e) = error {
                        self.notice = Some(e);
                        dirty = true;
                    }
                    if matches!(msg, Msg::Stopped) {
                        return Ok(Stop::Session(End::SamplerStopped(
                            "the background sampling ended".to_string(),
                        )));
                    }
                    if let Msg::Sample(seq) = msg {
                        // The newest snapshot with the split, maybe with
                        // others stored after it.
                        let seq = seq - seq % split;
                        newest = Some(seq);
                        // Snapshots come every SAMPLE_EVERY: refresh on
                        // the one nearest the refresh time.
                        let now = Instant::now();
                        if now + SAMPLE_EVERY / 2 >= next_refresh && Some(seq) != self.data.seq {
                            self.refresh(seq);
                            if self.data.interval.is_some() {
                                next_refresh = now + self.o.every;
                                if screen.is_none() {
                                    self.print_frame()?;
                                }
                            }
                            dirty = true;
                        }
                    }
                }
                Msg::Key(k) => match self.key(k) {
                    Some(stop) => return Ok(stop),
                    None => dirty = true,
                },
                Msg::Resize => dirty = true,
                Msg::Signal(sig) => return Ok(Stop::Signal(sig)),
                Msg::Input(why) => return Ok(Stop::Input(why)),
            }
            if dirty && let Some(s) = screen.as_deref_mut() {
                self.draw(s)?;
            }
        }
    }
}

/// Whether the terminal is in our hands (raw mode, alternate screen), for
/// the panic hook.
static TAKEN: AtomicBool = AtomicBool::new(false);

/// Gives the terminal back: raw mode off, the alternate screen left, the
/// cursor shown. Idempotent; errors are ignored (there is nothing better
/// to do with a terminal that cannot be written to).
fn restore() {
    if TAKEN.swap(false, Ordering::SeqCst) {
        let _ = terminal::disable_raw_mode();
        let _ = execute!(io::stdout(), terminal::LeaveAlternateScreen, cursor::Show);
    }
}

/// The terminal in raw mode on the alternate screen; restored on drop.
struct Screen {
    terminal: Terminal<CrosstermBackend<Stdout>>,
}

impl Screen {
    fn enter() -> io::Result<Screen> {
        static HOOK: std::sync::Once = std::sync::Once::new();
        HOOK.call_once(|| {
            let previous = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                restore();
                previous(info);
            }));
        });
        TAKEN.store(true, Ordering::SeqCst);
        // From here on, a failure restores what was done so far.
        let restore_on_error = |e: io::Error| {
            restore();
            e
        };
        terminal::enable_raw_mode().map_err(restore_on_error)?;
        execute!(io::stdout(), terminal::EnterAlternateScreen, cursor::Hide)
            .map_err(restore_on_error)?;
        let terminal =
            Terminal::new(CrosstermBackend::new(io::stdout())).map_err(restore_on_error)?;
        Ok(Screen { terminal })
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        restore();
    }
}

#[cfg(test)]
mod tests;
