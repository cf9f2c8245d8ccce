//! Events about parents (`events.k8s.io/v1`).
//!
//! kube-runtime's `Recorder` treats every event with the same type, reason and action about
//! the same object as a repeat for six minutes, and keeps the first one's note: two
//! `ApplyFailed` events with different messages, or two reconciles that changed different
//! members, showed the first note twice. Here the note is part of what makes two events the
//! same: the same note again within [`REPEAT_WINDOW`] raises the count of the event already
//! published (its `series`), a different note is a new event.

use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use k8s_openapi::{
    api::{core::v1::ObjectReference, events::v1::Event, events::v1::EventSeries},
    apimachinery::pkg::apis::meta::v1::MicroTime,
    jiff::Timestamp,
};
use kube::{
    Api, Client,
    api::{ObjectMeta, Patch, PatchParams, PostParams},
};
use parking_lot::Mutex;
use serde_json::json;

/// How long a published event is remembered: the same note within it is a repeat.
pub const REPEAT_WINDOW: Duration = Duration::from_secs(6 * 60);

/// The type of an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

impl EventType {
    fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// What makes two events the same.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key {
    regarding: (
        Option<String>,
        Option<String>,
        Option<String>,
        Option<String>,
    ),
    type_: &'static str,
    reason: String,
    action: String,
    note: String,
}

/// An event published earlier: its name and namespace, how often it happened, and when
/// it was last published.
struct Published {
    name: String,
    namespace: String,
    count: i32,
    last: Instant,
}

/// Publishes events as this operator (`reportingController`, and the pod as
/// `reportingInstance`).
pub struct Events {
    client: Client,
    controller: String,
    instance: String,
    published: Mutex<Remembered>,
}

/// The events published within [`REPEAT_WINDOW`], by the hash of their [`Key`] (a note is
/// up to 1000 bytes, and a large operator publishes tens of thousands of events in the
/// window: only 8 bytes of each is kept), and when those too old were last forgotten (at
/// most every [`FORGET_EVERY`], not at every event: that would scan them all each time).
#[derive(Default)]
struct Remembered {
    by_key: HashMap<u64, Published>,
    forgotten: Option<Instant>,
}

/// How often events older than [`REPEAT_WINDOW`] are forgotten.
const FORGET_EVERY: Duration = Duration::from_secs(30);

impl Key {
    fn hash64(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.hash(&mut h);
        h.finish()
    }
}

impl Events {
    pub fn new(client: Client, controller: &str, instance: Option<String>) -> Self {
        Events {
            client,
            controller: controller.to_string(),
            instance: instance.unwrap_or_else(|| controller.to_string()),
            published: Mutex::new(Remembered::default()),
        }
    }

    /// Publishes an event of `type_` about `regarding`: a new
    /// one, or a repeat of the same note raising the count of the earlier one.
    pub async fn publish(
        &self,
        regarding: &ObjectReference,
        type_: EventType,
        reason: &str,
        action: &str,
        note: &str,
    ) -> Result<(), kube::Error> {
        let type_ = type_.as_str();
        let key = Key {
            regarding: (
                regarding.api_version.clone(),
                regarding.kind.clone(),
                regarding.namespace.clone(),
                regarding.name.clone(),
            ),
            type_,
            reason: reason.to_string(),
            action: action.to_string(),
            note: note.to_string(),
        };
        let now = Timestamp::now();
        let repeat = self.repeat_of(&key);
        let stored = match repeat {
            Some((name, namespace, count)) => {
                let series = EventSeries {
                    count,
                    last_observed_time: MicroTime(now),
                };
                let patch = json!({"series": series});
                Api::<Event>::namespaced(self.client.clone(), &namespace)
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .map(|_| (name, namespace, count))
            }
            None => self.create(regarding, &key, now).await,
        };
        let (name, namespace, count) = stored?;
        self.published.lock().by_key.insert(
            key.hash64(),
            Published {
                name,
                namespace,
                count,
                last: Instant::now(),
            },
        );
        Ok(())
    }

    /// Creates a new event for `key` about `regarding`; returns its name, namespace and count.
    async fn create(
        &self,
        regarding: &ObjectReference,
        key: &Key,
        now: Timestamp,
    ) -> Result<(String, String, i32), kube::Error> {
        let namespace = regarding
            .namespace
            .clone()
            .unwrap_or_else(|| "default".to_string());
        let name = format!(
            "{}.{:x}",
            regarding.name.as_deref().unwrap_or(&self.controller),
            now.as_nanosecond()
        );
        let event = Event {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(namespace.clone()),
                ..ObjectMeta::default()
            },
            action: Some(key.action.clone()),
            reason: Some(key.reason.clone()),
            note: Some(key.note.clone()),
            type_: Some(key.type_.to_string()),
            event_time: Some(MicroTime(now)),
            regarding: Some(regarding.clone()),
            reporting_controller: Some(self.controller.clone()),
            reporting_instance: Some(self.instance.clone()),
            ..Event::default()
        };
        Api::<Event>::namespaced(self.client.clone(), &namespace)
            .create(&PostParams::default(), &event)
            .await
            .map(|_| (name, namespace, 1))
    }

    /// The earlier event `key` repeats (its name, namespace and the count this one makes),
    /// if one was published within the window; forgets those older than that.
    fn repeat_of(&self, key: &Key) -> Option<(String, String, i32)> {
        let mut published = self.published.lock();
        if published
            .forgotten
            .is_none_or(|t| t.elapsed() >= FORGET_EVERY)
        {
            published
                .by_key
                .retain(|_, p| p.last.elapsed() < REPEAT_WINDOW);
            published.forgotten = Some(Instant::now());
        }
        published
            .by_key
            .get(&key.hash64())
            .filter(|p| p.last.elapsed() < REPEAT_WINDOW)
            .map(|p| {
                (
                    p.name.clone(),
                    p.namespace.clone(),
                    p.count.saturating_add(1),
                )
            })
    }
}
