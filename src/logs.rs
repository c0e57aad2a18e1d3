//! JSON log lines in the shape Gardener's components write and its log stack reads: `level`,
//! `ts`, `logger`, `msg`, then the fields of the spans around the event and of the event
//! itself, flat (`{"level":"info","ts":…,"msg":"Claimed a free binding","claim":"kcp/c1",
//! "tenant":"ga-1","binding":"aws-3"}`).

use std::fmt;

use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Metadata, Subscriber};
use tracing_log::NormalizeEvent;
use tracing_subscriber::fmt::format::{JsonFields, Writer};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormattedFields};
use tracing_subscriber::registry::LookupSpan;

/// The event format of `hap run --log-format json`; span fields are kept as JSON
/// ([`JsonFields`]), so that they can be laid out flat.
pub struct GardenerJson;

impl<S> FormatEvent<S, JsonFields> for GardenerJson
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, JsonFields>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        // A record of the `log` crate (rustls) under its own target and level.
        let normalized = event.normalized_metadata();
        let meta: &Metadata<'_> = normalized.as_ref().unwrap_or_else(|| event.metadata());
        let mut line = Map::new();
        // Outermost span first: an inner span's field, then the event's, wins a shared key.
        for span in ctx.event_scope().into_iter().flat_map(|s| s.from_root()) {
            let ext = span.extensions();
            let fields = ext.get::<FormattedFields<JsonFields>>();
            if let Some(Ok(Value::Object(m))) = fields.map(|f| serde_json::from_str(f)) {
                line.extend(m.into_iter().map(|(k, v)| (renamed(&k).to_string(), v)));
            }
        }
        event.record(&mut Fields(&mut line));
        // Last, so that no field can pass for the line's own keys.
        line.insert("level".into(), level_name(meta.level()).into());
        line.insert("ts".into(), timestamp().into());
        line.insert("logger".into(), meta.target().into());
        writeln!(writer, "{}", Value::Object(line))
    }
}

/// zap's level names, which Gardener's components log.
fn level_name(level: &Level) -> &'static str {
    match *level {
        Level::ERROR => "error",
        Level::WARN => "warn",
        Level::INFO => "info",
        Level::DEBUG => "debug",
        Level::TRACE => "trace",
    }
}

/// RFC 3339 in UTC with milliseconds, as `ts` of Gardener's JSON logs.
fn timestamp() -> String {
    let now = jiff::Timestamp::now();
    format!("{:.3}", now)
}

/// A field's key in the line: the message is `msg`; a field named like one of the line's own
/// keys keeps its value under `field.<name>`.
fn renamed(name: &str) -> std::borrow::Cow<'_, str> {
    match name {
        "message" => "msg".into(),
        "level" | "ts" | "logger" => format!("field.{name}").into(),
        name => name.into(),
    }
}

/// An event's fields into the line; the `log` crate's own (`log.target`, …) are in the envelope.
struct Fields<'a>(&'a mut Map<String, Value>);

impl Fields<'_> {
    fn put(&mut self, field: &Field, value: Value) {
        if !field.name().starts_with("log.") {
            self.0.insert(renamed(field.name()).into_owned(), value);
        }
    }
}

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, value.into());
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, value.into());
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, value.into());
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, value.into());
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.put(field, value.into());
    }
    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.put(field, value.to_string().into());
    }
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.put(field, format!("{value:?}").into());
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// Every line the formatter writes, parsed.
    fn lines_of(emit: impl FnOnce()) -> Vec<Value> {
        let buf = Arc::new(Mutex::new(Vec::<u8>::new()));
        let sink = buf.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(Level::DEBUG)
            .fmt_fields(JsonFields::new())
            .event_format(GardenerJson)
            .with_writer(move || Sink(sink.clone()))
            .finish();
        tracing::subscriber::with_default(subscriber, emit);
        let text = String::from_utf8(buf.lock().unwrap().clone()).unwrap();
        text.lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect()
    }

    struct Sink(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Sink {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_line_carries_gardeners_keys_and_the_span_fields_flat() {
        let lines = lines_of(|| {
            let outer = tracing::info_span!("reconcile", claim = "kcp/c1", tenant = "ga-1");
            let _o = outer.enter();
            let inner = tracing::info_span!("write", binding = tracing::field::Empty);
            inner.record("binding", "aws-3");
            let _i = inner.enter();
            tracing::info!(attempt = 2u64, "Claimed a free binding");
        });
        let [line] = lines.as_slice() else {
            panic!("{lines:?}")
        };
        assert_eq!(line["level"], "info");
        assert_eq!(line["msg"], "Claimed a free binding");
        assert_eq!(line["logger"], module_path!());
        assert_eq!(
            (&line["claim"], &line["tenant"], &line["binding"]),
            (
                &Value::from("kcp/c1"),
                &Value::from("ga-1"),
                &Value::from("aws-3")
            )
        );
        assert_eq!(line["attempt"], 2);
        let ts = line["ts"].as_str().expect("ts");
        assert!(
            ts.ends_with('Z') && ts.len() == "2026-12-06T06:00:00.000Z".len(),
            "{ts}"
        );
        assert!(line.get("fields").is_none() && line.get("span").is_none());
    }

    #[test]
    fn an_inner_span_and_then_the_event_win_a_shared_key() {
        let lines = lines_of(|| {
            let _o = tracing::info_span!("a", claim = "outer").entered();
            let _i = tracing::info_span!("b", claim = "inner").entered();
            tracing::warn!("first");
            tracing::warn!(claim = "event", error = %std::fmt::Error, "second");
        });
        assert_eq!(lines[0]["claim"], "inner");
        assert_eq!(
            (&lines[1]["claim"], &lines[1]["level"]),
            (&Value::from("event"), &Value::from("warn"))
        );
        assert_eq!(
            lines[1]["error"],
            "an error occurred when formatting an argument"
        );
    }

    #[test]
    fn a_field_cannot_pass_for_the_lines_own_keys() {
        let lines = lines_of(|| {
            let _s = tracing::info_span!("a", level = "span", message = "from a span").entered();
            tracing::error!(ts = 1u64, logger = "forged", "real");
        });
        let line = &lines[0];
        assert_eq!(
            (&line["level"], &line["msg"]),
            (&Value::from("error"), &Value::from("real"))
        );
        assert_eq!(line["logger"], module_path!());
        assert!(line["ts"].is_string(), "{line}");
        assert_eq!(line["field.level"], "span");
        assert_eq!(
            (&line["field.ts"], &line["field.logger"]),
            (&Value::from(1), &Value::from("forged"))
        );
    }

    /// rustls logs through the `log` crate: its records keep their own target and level, and the
    /// bridge's `log.*` fields stay out of the line.
    #[test]
    fn a_record_of_the_log_crate_keeps_its_target() {
        use tracing_log::log;
        let lines = lines_of(|| {
            let logger = tracing_log::LogTracer::new();
            let record = log::Record::builder()
                .level(log::Level::Warn)
                .target("rustls::common_state")
                .args(format_args!("Sending fatal alert BadCertificate"))
                .build();
            log::Log::log(&logger, &record);
        });
        let line = &lines[0];
        assert_eq!(
            (&line["logger"], &line["level"]),
            (&Value::from("rustls::common_state"), &Value::from("warn"))
        );
        assert_eq!(line["msg"], "Sending fatal alert BadCertificate");
        let log_keys: Vec<_> = line
            .as_object()
            .unwrap()
            .keys()
            .filter(|k| k.starts_with("log."))
            .collect();
        assert!(log_keys.is_empty(), "{line}");
    }
}
