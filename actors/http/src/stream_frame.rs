//! Nomad's `StreamFrame`, the one framing of every streamed client answer
//! (`/v1/client/fs/logs`, `/v1/client/fs/stream`): one JSON object per
//! frame, `{"Offset": <where Data ends in File>, "Data": "<base64>",
//! "File": "<path>", "FileEvent": "file truncated"}`, empty fields left
//! out, so that a heartbeat is `{}`.

use actix_web::web::Bytes;
use base64::Engine;
use serde::Serialize;

/// Largest piece of a file one frame carries (Nomad's frame size).
pub const FRAME_BYTES: usize = 64 * 1024;

/// Nomad's `FileEvent` when a followed file shrank (reading restarts at 0).
pub const TRUNCATE_EVENT: &str = "file truncated";
/// Nomad's `FileEvent` when a followed file was removed (the stream ends).
pub const DELETE_EVENT: &str = "file deleted";

/// One frame; `StreamFrame::default()` is the heartbeat.
#[derive(Serialize, Default)]
#[serde(rename_all = "PascalCase")]
pub struct StreamFrame {
    #[serde(skip_serializing_if = "is_zero")]
    pub offset: u64,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub data: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub file: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub file_event: String,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl StreamFrame {
    /// A frame of `data` read from `file`, ending at `offset`.
    pub fn data(file: String, data: &[u8], offset: u64) -> StreamFrame {
        StreamFrame {
            offset,
            data: base64::engine::general_purpose::STANDARD.encode(data),
            file,
            file_event: String::new(),
        }
    }

    /// The frame's JSON, newline-terminated.
    pub fn encode(&self) -> Bytes {
        let mut line = serde_json::to_vec(self).unwrap_or_else(|_| b"{}".to_vec());
        line.push(b'\n');
        Bytes::from(line)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_nomads_and_a_heartbeat_is_empty() {
        let frame = StreamFrame::data("alloc/logs/web.stdout.0".into(), b"hello", 5);
        assert_eq!(
            &frame.encode()[..],
            b"{\"Offset\":5,\"Data\":\"aGVsbG8=\",\"File\":\"alloc/logs/web.stdout.0\"}\n"
        );
        assert_eq!(&StreamFrame::default().encode()[..], b"{}\n");
        let event = StreamFrame {
            offset: 0,
            file: "f".into(),
            file_event: TRUNCATE_EVENT.into(),
            ..Default::default()
        };
        assert_eq!(
            &event.encode()[..],
            b"{\"File\":\"f\",\"FileEvent\":\"file truncated\"}\n"
        );
    }
}
