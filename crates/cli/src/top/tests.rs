//! The screen as a function of the view, drawn with ratatui's
//! `TestBackend`: real records (a sampler of this test process, with
//! probes), with threads, names and findings set to what each case needs.

use std::time::Duration;

use ratatui::Terminal;
use ratatui::backend::TestBackend;
use wakemeter::{Finding, Interval, KernelThreadInterval, Report, SamplerBuilder, ThreadInterval};

use super::render::{self, Drawn, text_of};
use super::view::{Kernel, SortKey, View};

/// A real report and interval of this process; with `probes`, one loop
/// and one sleep site that did some work.
fn measured(probes: bool) -> (Report, Interval) {
    let sampler = SamplerBuilder::new().build().unwrap();
    sampler.sample_now().unwrap();
    if probes {
        let mut l = sampler.loop_probe("epoll-main").unwrap();
        let mut s = sampler.sleep_probe("usleep-poller").unwrap();
        for _ in 0..20 {
            l.before_wait(Some(Duration::from_millis(1)));
            std::thread::sleep(Duration::from_micros(200));
            l.after_wait(0);
            s.sleep(Duration::from_micros(200));
        }
        sampler.sample_now().unwrap();
        let report = sampler.report();
        let interval = sampler.latest_interval().unwrap();
        assert_eq!((interval.loops.len(), interval.sleeps.len()), (1, 1));
        return (report, interval);
    }
    std::thread::sleep(Duration::from_millis(20));
    sampler.sample_now().unwrap();
    (sampler.report(), sampler.latest_interval().unwrap())
}

/// A copy of `like` with this TID, name and CPU share (and switches in
/// proportion, so sorting by switches gives another order).
fn thread(like: &ThreadInterval, tid: u64, name: &str, cpu: f64, switches: f64) -> ThreadInterval {
    let mut t = like.clone();
    t.tid = tid;
    t.name = name.to_string();
    t.cpu_percent = cpu;
    t.switches_per_sec = Some(switches);
    t.voluntary_switches_per_sec = Some(switches);
    t.involuntary_switches_per_sec = Some(0.0);
    t.run_queue_wait_percent = Some(0.5);
    t.kernel = None;
    t
}

/// A kernel view of a thread with `wakes` wakes/s, half its time blocked
/// in poll.
fn kernel(wakes: f64, interval_ns: u64) -> KernelThreadInterval {
    serde_json::from_value(serde_json::json!({
        "on_cpu_percent": 10.0,
        "voluntary_switches_per_sec": wakes,
        "involuntary_switches_per_sec": 0.0,
        "off_cpu": {"sleep_ns": 0, "lock_ns": 0, "poll_ns": interval_ns / 2,
                     "io_ns": 0, "preempted_ns": 0, "other_ns": 0},
        "blocked_percent": 50.0,
        "wakes_per_sec": wakes,
        "interrupt_wakes_per_sec": 0.0,
        "process_thread_wakes_per_sec": wakes,
        "other_process_wakes_per_sec": 0.0,
        "poll_calls_per_sec": wakes,
        "blocking_polls_per_sec": wakes,
        "idle_nonblocking_polls_per_sec": 0.0,
        "idle_poll_ratio": 0.0,
        "zero_timeout_poll_ratio": 0.0,
        "sleeps_per_sec": 0.0,
        "interrupted_sleeps_per_sec": 0.0,
        "mean_sleep_requested_ns": 0,
        "unknown_request_sleeps": 0,
        "mean_sleep_actual_ns": 0,
        "calls_by_syscall": [],
        "top_wakers": []
    }))
    .unwrap()
}

fn finding(summary: &str) -> Finding {
    serde_json::from_value(serde_json::json!({
        "kind": "busy_poller",
        "severity": "critical",
        "subject": {"type": "thread", "tid": 2, "name": "spinner"},
        "summary": summary,
        "evidence": [],
        "advice": "block in the wait instead of polling",
        "window_ns": 2_000_000_000u64
    }))
    .unwrap()
}

/// Three threads: `spinner` busiest by CPU, `chatty` busiest by switches.
fn three(i: &mut Interval) {
    let like = i.threads[0].clone();
    i.threads = vec![
        thread(&like, 11, "idle", 0.5, 1.0),
        thread(&like, 12, "spinner", 97.0, 3.0),
        thread(&like, 13, "chatty", 20.0, 9000.0),
    ];
}

const ATTACHED: Kernel = Kernel::Attached;

fn view<'a>(report: &'a Report, i: &'a Interval, sort: SortKey) -> View<'a> {
    View::new(
        4242,
        "envoy",
        Duration::from_secs(83),
        Duration::from_secs(1),
        &ATTACHED,
        report,
        Some(i),
        sort,
    )
}

/// Draws `v` on a `w`×`h` test terminal; the screen's text and what it drew.
fn draw(v: &View, scroll: usize, w: u16, h: u16) -> (String, Drawn) {
    let mut t = Terminal::new(TestBackend::new(w, h)).unwrap();
    let mut drawn = None;
    t.draw(|f| drawn = Some(render::render(v, scroll, f.area(), f.buffer_mut())))
        .unwrap();
    (text_of(t.backend().buffer()), drawn.unwrap())
}

/// The thread names of the table's rows, top to bottom.
fn row_names(screen: &str) -> Vec<String> {
    screen
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("TID"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .map(|l| l.split_whitespace().nth(1).unwrap_or_default().to_string())
        .collect()
}

#[test]
fn rows_are_sorted_by_the_chosen_key_and_findings_are_shown() {
    let (mut report, mut i) = measured(false);
    three(&mut i);
    report.findings = vec![finding(
        "thread 12 \"spinner\" wakes 9000 times/s and finds nothing",
    )];
    let (screen, drawn) = draw(&view(&report, &i, SortKey::Cpu), 0, 120, 30);
    assert_eq!(
        row_names(&screen),
        ["spinner", "chatty", "idle"],
        "{screen}"
    );
    assert_eq!(drawn.first, 0);
    assert!(
        screen.contains("process 4242 (envoy)  watching 0:01:23"),
        "{screen}"
    );
    assert!(
        screen.contains("[CRITICAL] busy_poller: thread 12 \"spinner\" wakes 9000 times/s"),
        "{screen}"
    );
    assert!(screen.contains("advice: block in the wait"), "{screen}");
    assert!(screen.contains("threads 1-3 of 3"), "{screen}");
    // The findings sit at the bottom, just above the footer.
    let lines: Vec<&str> = screen.lines().collect();
    assert!(lines[lines.len() - 2].contains("advice:"), "{screen}");

    let (screen, _) = draw(&view(&report, &i, SortKey::Switches), 0, 120, 30);
    assert_eq!(
        row_names(&screen),
        ["chatty", "spinner", "idle"],
        "{screen}"
    );
    assert!(screen.contains("sort (by switches/s)"), "{screen}");
}

#[test]
fn without_findings_it_says_there_are_none() {
    let (mut report, mut i) = measured(false);
    three(&mut i);
    report.findings.clear();
    let (screen, _) = draw(&view(&report, &i, SortKey::Cpu), 0, 120, 30);
    assert!(screen.contains("findings: none"), "{screen}");
}

#[test]
fn kernel_columns_appear_with_the_kernel_view_and_sort_by_wakes() {
    let (report, mut i) = measured(false);
    three(&mut i);
    let (screen, _) = draw(&view(&report, &i, SortKey::Cpu), 0, 160, 30);
    assert!(!screen.contains("wakes/s"), "{screen}");

    let ns = i.duration_ns;
    i.threads[0].kernel = Some(kernel(5000.0, ns));
    i.threads[2].kernel = Some(kernel(10.0, ns));
    let (screen, _) = draw(&view(&report, &i, SortKey::Wakes), 0, 160, 30);
    assert!(
        screen.contains("wakes/s  polls/s blocked%  off-CPU by cause"),
        "{screen}"
    );
    // Threads without a kernel record come last, whatever their CPU.
    assert_eq!(
        row_names(&screen),
        ["idle", "chatty", "spinner"],
        "{screen}"
    );
    let idle = screen.lines().find(|l| l.contains(" idle ")).unwrap();
    assert!(idle.ends_with("poll 50%"), "{idle}");
}

#[test]
fn hostile_names_are_escaped_and_cut_to_their_column() {
    let (mut report, mut i) = measured(false);
    let like = i.threads[0].clone();
    i.threads = vec![
        thread(&like, 21, "\x1b]0;pwned!!\x07", 50.0, 1.0),
        thread(&like, 22, "\x1b[2J\x1b[H", 40.0, 1.0),
        thread(&like, 23, "c1\u{9b}31m\u{7f}", 30.0, 1.0),
        thread(&like, 24, "evil\u{202e}txt", 20.0, 1.0),
    ];
    report.findings = vec![finding("thread \x1b]0;pwned\x07 wakes a lot")];
    let (screen, _) = draw(&view(&report, &i, SortKey::Cpu), 0, 120, 30);
    assert!(
        !screen
            .chars()
            .any(|c| c.is_control() && c != '\n' || c == '\u{202e}'),
        "{screen:?}"
    );
    // 16 cells: the escape's text, cut with an ellipsis.
    assert!(
        screen.contains("      21 \\x1b]0;pwned!!\\…   50.0"),
        "{screen}"
    );
    assert!(
        screen.contains("      22 \\x1b[2J\\x1b[H      40.0"),
        "{screen}"
    );
    assert!(screen.contains("c1\\u{9b}31m\\x7f"), "{screen}");
    assert!(screen.contains("evil\\u{202e}txt"), "{screen}");
    assert!(
        screen.contains("thread \\x1b]0;pwned\\x07 wakes a lot"),
        "{screen}"
    );
    // Every CPU% lines up under its header, whatever the name.
    let header = screen
        .lines()
        .find(|l| l.trim_start().starts_with("TID"))
        .unwrap();
    let col = header.find("CPU%").unwrap() + "CPU%".len();
    for l in screen
        .lines()
        .filter(|l| l.contains("\\x1b") && !l.contains("busy_poller"))
    {
        let cells: Vec<char> = l.chars().collect();
        assert_eq!(cells[col - 1], '0', "{l}\n{header}");
    }
}

#[test]
fn thousands_of_threads_draw_one_screen_and_scroll_within_bounds() {
    let (report, mut i) = measured(false);
    let like = i.threads[0].clone();
    i.threads = (0..5000)
        .map(|k| {
            thread(
                &like,
                1000 + k,
                &format!("worker-{k}"),
                (k % 97) as f64,
                1.0,
            )
        })
        .collect();
    let v = view(&report, &i, SortKey::Cpu);
    let (screen, drawn) = draw(&v, 0, 120, 30);
    assert_eq!(screen.lines().count(), 30);
    let rows = row_names(&screen);
    assert_eq!(rows.len(), drawn.rows, "{screen}");
    assert!(drawn.rows >= 10 && drawn.rows < 30, "{drawn:?}");
    assert!(
        screen.contains(&format!("threads 1-{} of 5000", drawn.rows)),
        "{screen}"
    );
    assert!(screen.contains("96.0"), "the busiest come first\n{screen}");
    // Scrolling past the end stops at the last full page.
    let (screen, last) = draw(&v, usize::MAX, 120, 30);
    assert_eq!(last.first, 5000 - last.rows);
    assert!(
        screen.contains(&format!("threads {}-5000 of 5000", last.first + 1)),
        "{screen}"
    );
    assert!(screen.lines().any(|l| l.contains("   0.0")), "{screen}");
}

#[test]
fn loops_and_sleep_sites_show_only_when_the_target_has_probes() {
    let (report, i) = measured(true);
    let (screen, _) = draw(&view(&report, &i, SortKey::Cpu), 0, 120, 40);
    assert!(screen.contains("LOOP              wakeups/s"), "{screen}");
    assert!(screen.contains("epoll-main"), "{screen}");
    assert!(screen.contains("SLEEP SITE"), "{screen}");
    assert!(screen.contains("usleep-poller"), "{screen}");

    let (report, i) = measured(false);
    let (screen, _) = draw(&view(&report, &i, SortKey::Cpu), 0, 120, 40);
    assert!(
        !screen.contains("LOOP") && !screen.contains("SLEEP SITE"),
        "{screen}"
    );
}

#[test]
fn a_tiny_terminal_keeps_the_table_and_the_footer() {
    let (mut report, mut i) = measured(true);
    three(&mut i);
    report.findings = (0..6).map(|k| finding(&format!("finding {k}"))).collect();
    for (w, h) in [(40, 8), (120, 12), (10, 3), (1, 1)] {
        let (screen, drawn) = draw(&view(&report, &i, SortKey::Cpu), 0, w, h);
        if h >= 8 {
            assert!(drawn.rows >= 3, "{w}x{h}: {drawn:?}\n{screen}");
            assert_eq!(row_names(&screen)[0], "spinner", "{screen}");
            assert!(screen.lines().last().unwrap().contains(" q "), "{screen}");
        }
    }
    // With room for some findings only, the rest are counted.
    let (screen, _) = draw(&view(&report, &i, SortKey::Cpu), 0, 120, 20);
    assert!(screen.contains("more"), "{screen}");
}

#[test]
fn a_plain_frame_is_the_screen_as_text_with_the_busiest_threads() {
    let (mut report, mut i) = measured(false);
    let like = i.threads[0].clone();
    i.threads = (0..100)
        .map(|k| thread(&like, 1000 + k, &format!("w{k}"), k as f64, 1.0))
        .collect();
    report.findings = vec![finding("the whole summary, however long it is, is kept")];
    let mut v = view(&report, &i, SortKey::Cpu);
    v.interactive = false;
    let text = render::plain(&v, 160, 10);
    let rows = row_names(&text);
    assert_eq!(
        rows,
        (90..100).rev().map(|k| format!("w{k}")).collect::<Vec<_>>(),
        "{text}"
    );
    assert!(text.lines().all(|l| l == l.trim_end()), "{text}");
    assert!(text.contains("advice: block in the wait"), "{text}");
    assert!(
        text.contains("threads 1-10 of 100, sorted by CPU%"),
        "{text}"
    );
    assert!(!text.contains(" q "), "no keys in a plain frame\n{text}");
}

/// A summary and an advice longer than the screen is wide are wrapped at
/// word boundaries, on the screen and in a plain frame: every word is
/// there, no line is wider than the screen.
#[test]
fn long_findings_are_wrapped_not_cut() {
    let (mut report, mut i) = measured(false);
    three(&mut i);
    let summary = "thread 12 \"spinner\" polls 41000 times/s (poll(2) 41000/s), 40990 of them find \
                   nothing without waiting, and it is blocked only 0% of the time (kernel view): it \
                   is busy-polling, using 97% of a core";
    let mut f = finding(summary);
    f.advice = "Block in the wait until an event arrives or the next timer is due instead of \
                polling: pass a real timeout (not 0) to poll/epoll_wait/kevent and check the \
                backend the loop chose"
        .to_string();
    report.findings = vec![f];
    let words =
        |text: &str| -> Vec<String> { text.split_whitespace().map(str::to_string).collect() };
    let check = |screen: &str, width: usize| {
        assert!(
            screen
                .lines()
                .all(|l| unicode_width::UnicodeWidthStr::width(l) <= width),
            "{screen}"
        );
        let all = words(screen);
        for w in words(summary)
            .iter()
            .chain(&words(&report.findings[0].advice))
        {
            assert!(all.contains(w), "{w:?} missing\n{screen}");
        }
    };
    let (screen, _) = draw(&view(&report, &i, SortKey::Cpu), 0, 60, 40);
    check(&screen, 60);
    let mut v = view(&report, &i, SortKey::Cpu);
    v.interactive = false;
    check(&render::plain(&v, 70, 10), 70);
}
