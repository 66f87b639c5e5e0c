//! Hostile trace files for the Chrome trace reader (issue 19): times that are NaN, infinite,
//! absurd or negative durations are errors naming the event and field, never drawn or dropped
//! silently; and arbitrary event soup never panics, while whatever is accepted has finite,
//! ordered spans.

use proptest::prelude::*;
use tpuemu_isa::trace::TraceEvent;
use tpuemu_isa::trace::chrome::from_chrome_json;

fn err(text: &str) -> String {
    match from_chrome_json(text) {
        Ok(_) => panic!("accepted: {text}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn bad_times_are_errors_naming_the_event_and_field() {
    let e = err(r#"[{"ph":"X","name":"a","ts":0,"dur":-5,"pid":1,"tid":1}]"#);
    assert!(
        e.contains("event 0") && e.contains("`dur`") && e.contains("negative"),
        "{e}"
    );
    let e = err(r#"[{"ph":"X","name":"a","ts":"NaN","dur":1,"pid":1,"tid":1}]"#);
    assert!(e.contains("`ts`") && e.contains("finite"), "{e}");
    let e = err(r#"[{"ph":"X","name":"a","ts":"inf","dur":1,"pid":1,"tid":1}]"#);
    assert!(e.contains("`ts`"), "{e}");
    let e =
        err(r#"[{"ph":"X","name":"a","ts":0,"dur":1},{"ph":"X","name":"b","ts":1e300,"dur":1}]"#);
    assert!(e.contains("event 1") && e.contains("`ts`"), "{e}");
    // An end before its begin.
    let e =
        err(r#"[{"ph":"B","name":"a","ts":10,"pid":1,"tid":1},{"ph":"E","ts":5,"pid":1,"tid":1}]"#);
    assert!(
        e.contains("event 1") && e.contains("before it began"),
        "{e}"
    );
    // Good times are read.
    let t =
        from_chrome_json(r#"[{"ph":"X","name":"a","ts":1.5,"dur":2,"pid":1,"tid":1}]"#).unwrap();
    let spans: Vec<_> = t
        .events
        .iter()
        .filter_map(|e| match e {
            TraceEvent::Span(s) => Some((s.start_ns, s.end_ns)),
            _ => None,
        })
        .collect();
    assert_eq!(spans, [(1500.0, 3500.0)]);
}

const EVENT_FRAGMENTS: &[&str] = &[
    "[",
    "]",
    "{",
    "}",
    ",",
    ":",
    "\"ph\"",
    "\"X\"",
    "\"B\"",
    "\"E\"",
    "\"C\"",
    "\"s\"",
    "\"f\"",
    "\"M\"",
    "\"ts\"",
    "\"dur\"",
    "\"pid\"",
    "\"tid\"",
    "\"name\"",
    "\"args\"",
    "\"id\"",
    "\"track\"",
    "\"traceEvents\"",
    "\"otherData\"",
    "\"tpuemu\"",
    "0",
    "1",
    "-1",
    "1e300",
    "-1e300",
    "\"nan\"",
    "\"inf\"",
    "\"-5\"",
    "1.5",
    "18446744073709551616",
    "null",
    "true",
    "\"a\"",
    "\"é\"",
];

fn check(text: &str) -> Result<(), TestCaseError> {
    if let Ok(t) = from_chrome_json(text) {
        for e in &t.events {
            if let TraceEvent::Span(s) = e {
                prop_assert!(s.start_ns.is_finite() && s.end_ns.is_finite(), "{:?}", s);
                prop_assert!(s.end_ns >= s.start_ns, "{:?}", s);
            }
        }
    }
    Ok(())
}

proptest! {
    // Bounded for CI: about a second.
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn event_soup_never_panics_and_accepted_spans_are_ordered(
        parts in proptest::collection::vec(proptest::sample::select(EVENT_FRAGMENTS), 0..40),
    ) {
        check(&parts.join(""))?;
    }

    #[test]
    fn events_with_any_numbers_never_panic(
        events in proptest::collection::vec(
            (
                proptest::sample::select(&["X", "B", "E", "C", "s", "f", "i", "M", "?"][..]),
                any::<f64>(),
                any::<f64>(),
                any::<i64>(),
                0u64..3,
            ),
            0..12,
        ),
    ) {
        let items: Vec<String> = events
            .iter()
            .map(|(ph, ts, dur, id, tid)| {
                // serde_json writes non-finite numbers as null: also try them as strings.
                let num = |x: f64| if x.is_finite() { format!("{x:e}") } else { format!("\"{x}\"") };
                format!(
                    r#"{{"ph":"{ph}","name":"n","ts":{},"dur":{},"id":{id},"pid":1,"tid":{tid},"args":{{"v":{}}}}}"#,
                    num(*ts),
                    num(*dur),
                    num(*ts)
                )
            })
            .collect();
        check(&format!("[{}]", items.join(",")))?;
        check(&format!(r#"{{"traceEvents":[{}]}}"#, items.join(",")))?;
    }
}
