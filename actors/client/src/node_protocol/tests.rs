//! The node session on a fake clock: every time is `t0` plus a duration.

use super::*;
use herder::structs::new_id;

type Session = NodeSession<&'static str>;

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

fn servers(n: usize) -> Vec<String> {
    (1..=n).map(|i| format!("10.0.0.{i}:4646")).collect()
}

fn answer(ttl: Duration) -> NodeAnswer {
    NodeAnswer {
        heartbeat_ttl: ttl,
        servers: None,
    }
}

fn unreachable() -> Failure {
    Failure::Unreachable("connection refused".into())
}

/// A client session registered at `t0` with a 20 s TTL, its first
/// blocking query sent.
fn registered(t0: Instant) -> Session {
    let mut s = Session::new(SessionConfig::client(servers(3), 7), t0);
    assert!(matches!(s.next_action(t0), Action::Register { .. }));
    s.registered(&answer(secs(20.0)), t0);
    assert!(matches!(
        s.next_action(t0),
        Action::WatchAllocs { index: 0, .. }
    ));
    s
}

#[test]
fn nothing_but_registration_until_the_servers_accept_the_node() {
    let t0 = Instant::now();
    let mut s = Session::new(SessionConfig::client(servers(1), 1), t0);
    s.queue_update(new_id(), "running", t0);
    assert_eq!(
        s.next_action(t0),
        Action::Register {
            server: "http://10.0.0.1:4646".into()
        }
    );
    // In flight: nothing else is due, not even the queued update.
    assert_eq!(s.next_action(t0 + secs(5.0)), Action::Wait(None));
    assert!(!s.is_registered());
    s.registered(&answer(secs(20.0)), t0 + secs(1.0));
    assert!(s.is_registered());
    assert!(matches!(
        s.next_action(t0 + secs(1.0)),
        Action::WatchAllocs { index: 0, .. }
    ));
    // The update waits its window from the registration.
    assert_eq!(
        s.next_action(t0 + secs(1.0)),
        Action::Wait(Some(t0 + secs(1.25)))
    );
}

#[test]
fn the_client_heartbeats_at_half_the_ttl_each_answer_hands_back() {
    let t0 = Instant::now();
    let mut s = registered(t0);
    assert_eq!(s.next_action(t0), Action::Wait(Some(t0 + secs(10.0))));
    assert_eq!(
        s.next_action(t0 + secs(9.9)),
        Action::Wait(Some(t0 + secs(10.0)))
    );
    assert!(matches!(
        s.next_action(t0 + secs(10.0)),
        Action::Heartbeat { .. }
    ));
    // One heartbeat in flight at a time.
    assert_eq!(s.next_action(t0 + secs(12.0)), Action::Wait(None));
    // The servers grew the TTL (more nodes): the period follows.
    s.heartbeat_answered(&answer(secs(60.0)), t0 + secs(10.5));
    assert_eq!(
        s.next_action(t0 + secs(10.5)),
        Action::Wait(Some(t0 + secs(40.5)))
    );
}

#[test]
fn a_jittered_fraction_keeps_every_heartbeat_inside_its_range() {
    let t0 = Instant::now();
    let mut config = SessionConfig::client(servers(1), 42);
    config.heartbeat_fraction = (0.5, 0.9);
    config.watch_allocs = false;
    let mut s = Session::new(config, t0);
    let _ = s.next_action(t0);
    s.registered(&answer(secs(10.0)), t0);
    let mut now = t0;
    let mut periods = Vec::new();
    for _ in 0..50 {
        let Action::Wait(Some(at)) = s.next_action(now) else {
            panic!("a heartbeat is scheduled");
        };
        periods.push(at - now);
        now = at;
        assert!(matches!(s.next_action(now), Action::Heartbeat { .. }));
        s.heartbeat_answered(&answer(secs(10.0)), now);
    }
    assert!(periods.iter().all(|p| *p >= secs(5.0) && *p < secs(9.0)));
    let (min, max) = (periods.iter().min(), periods.iter().max());
    assert!(
        max.zip(min).is_some_and(|(a, b)| *a - *b > secs(1.0)),
        "spread: {periods:?}"
    );
}

#[test]
fn a_heartbeat_answered_404_registers_again_and_follows_allocations_from_scratch() {
    let t0 = Instant::now();
    let mut s = registered(t0);
    assert!(s.allocs_answered(57, t0 + secs(1.0)));
    assert!(matches!(
        s.next_action(t0 + secs(1.0)),
        Action::WatchAllocs { index: 57, .. }
    ));
    let at = t0 + secs(10.0);
    let Action::Heartbeat { server } = s.next_action(at) else {
        panic!("heartbeat due");
    };
    // What herder's servers answer for a node they do not know.
    s.request_failed(
        Request::Heartbeat,
        &server,
        &Failure::Status(404, "node not found".into()),
        at,
    );
    assert!(!s.is_registered());
    // Not a server fault: same server, at once.
    assert_eq!(s.next_action(at), Action::Register { server });
    // The query in flight (index 57) answers from the old state: the next
    // one still starts from scratch.
    assert!(s.allocs_answered(60, at));
    s.registered(&answer(secs(20.0)), at);
    assert!(matches!(
        s.next_action(at),
        Action::WatchAllocs { index: 0, .. }
    ));
}

#[test]
fn failures_rotate_over_three_servers_and_back_to_the_first() {
    let t0 = Instant::now();
    let mut s = Session::new(SessionConfig::client(servers(3), 3), t0);
    let mut now = t0;
    let mut asked = Vec::new();
    for _ in 0..4 {
        let action = s.next_action(now);
        let Action::Register { server } = action else {
            if let Action::Wait(Some(at)) = action {
                now = at;
                continue;
            }
            panic!("registration or a wait, got {action:?}");
        };
        asked.push(server.clone());
        s.request_failed(Request::Register, &server, &unreachable(), now);
        let Action::Wait(Some(at)) = s.next_action(now) else {
            panic!("a retry is scheduled");
        };
        now = at;
    }
    assert_eq!(
        asked,
        [
            "http://10.0.0.1:4646",
            "http://10.0.0.2:4646",
            "http://10.0.0.3:4646",
            "http://10.0.0.1:4646"
        ]
    );
}

#[test]
fn only_a_servers_own_fault_moves_to_the_next_and_only_once() {
    let t0 = Instant::now();
    let mut s = registered(t0);
    let first = s.current_server().to_string();
    // A 4xx would be the same everywhere: stay.
    s.request_failed(
        Request::WatchAllocs,
        &first,
        &Failure::Status(403, "Permission denied".into()),
        t0,
    );
    assert_eq!(s.current_server(), first);
    // A 5xx moves on; a second failure from a request sent to the first
    // server before the move does not skip the second one.
    let Action::Heartbeat { server } = s.next_action(t0 + secs(10.0)) else {
        panic!("heartbeat due");
    };
    s.request_failed(
        Request::Heartbeat,
        &server,
        &Failure::Status(500, "no leader".into()),
        t0 + secs(10.0),
    );
    s.request_failed(
        Request::WatchAllocs,
        &first,
        &unreachable(),
        t0 + secs(10.0),
    );
    assert_eq!(s.current_server(), "http://10.0.0.2:4646");
}

#[test]
fn a_servers_list_in_an_answer_leads_the_failover_list() {
    let reply = serde_json::json!({
        "HeartbeatTTL": 15_000_000_000u64,
        "Servers": [
            {"RPCAdvertiseAddr": "10.0.0.9:4647", "HTTPAddr": "10.0.0.9:4646"},
            {"RPCAdvertiseAddr": "10.0.0.2:4647", "HTTPAddr": "http://10.0.0.2:4646/"},
            {"RPCAdvertiseAddr": "10.0.0.8:4647"}
        ]
    });
    let parsed = NodeAnswer::from_json(&reply);
    assert_eq!(parsed.heartbeat_ttl, secs(15.0));
    assert_eq!(
        parsed.servers.as_deref(),
        Some(
            &[
                "http://10.0.0.9:4646".to_string(),
                "http://10.0.0.2:4646".into()
            ][..]
        )
    );
    // Today's answers carry no list (and a zero TTL means the minimum).
    let bare = NodeAnswer::from_json(&serde_json::json!({"HeartbeatTTL": 0}));
    assert_eq!(bare, answer(DEFAULT_TTL));

    let t0 = Instant::now();
    let mut s = registered(t0);
    s.request_failed(
        Request::WatchAllocs,
        "http://10.0.0.1:4646",
        &unreachable(),
        t0,
    );
    assert_eq!(s.current_server(), "http://10.0.0.2:4646");
    let _ = s.next_action(t0 + secs(10.0));
    s.heartbeat_answered(&parsed, t0 + secs(10.0));
    // The servers' list first, then the configured ones it leaves out.
    assert_eq!(
        s.servers(),
        [
            "http://10.0.0.9:4646",
            "http://10.0.0.2:4646",
            "http://10.0.0.1:4646",
            "http://10.0.0.3:4646"
        ]
    );
    // The server in use is still listed: the node stays on it.
    assert_eq!(s.current_server(), "http://10.0.0.2:4646");
    // A list without it: the node picks one of the new servers.
    let moved = NodeAnswer {
        heartbeat_ttl: secs(15.0),
        servers: Some(vec!["10.0.1.1:4646".into(), "10.0.1.2:4646".into()]),
    };
    let at = t0 + secs(20.0);
    assert!(matches!(s.next_action(at), Action::Heartbeat { .. }));
    s.heartbeat_answered(&moved, at);
    assert!(s.current_server().starts_with("http://10.0.1."));
    assert_eq!(s.servers().len(), 2 + 3);
}

/// A client configured with one server learns the other two from its
/// first answers, and when that server dies it moves on to them (with no
/// more than the usual backoff), keeping its configured server last.
#[test]
fn a_client_given_one_server_fails_over_to_the_servers_it_was_told_of() {
    let t0 = Instant::now();
    let mut config = SessionConfig::client(vec!["10.0.0.1:4646".into()], 5);
    config.watch_allocs = false; // only the liveness lane matters here
    let mut s = Session::new(config, t0);
    let cluster = NodeAnswer {
        heartbeat_ttl: secs(10.0),
        servers: Some(servers(3)),
    };
    assert!(matches!(s.next_action(t0), Action::Register { .. }));
    s.registered(&cluster, t0);
    // The configured server is listed: the node stays on it.
    assert_eq!(s.current_server(), "http://10.0.0.1:4646");
    assert_eq!(s.servers().len(), 3);

    // It dies: each heartbeat that fails moves to the next server, and the
    // node is never left without a live one for long.
    let mut now = t0 + secs(5.0);
    let mut asked = Vec::new();
    loop {
        let Action::Heartbeat { server } = s.next_action(now) else {
            panic!("a heartbeat is due at {:?}", now - t0);
        };
        asked.push(server.clone());
        if server == "http://10.0.0.1:4646" {
            s.request_failed(Request::Heartbeat, &server, &unreachable(), now);
            let Action::Wait(Some(at)) = s.next_action(now) else {
                panic!("a retry is scheduled");
            };
            assert!(at - now <= secs(0.5), "retried after {:?}", at - now);
            now = at;
            continue;
        }
        // The survivors answer, without the dead one any more.
        let survivors = NodeAnswer {
            heartbeat_ttl: secs(10.0),
            servers: Some(servers(3)[1..].to_vec()),
        };
        s.heartbeat_answered(&survivors, now);
        break;
    }
    assert_eq!(asked, ["http://10.0.0.1:4646", "http://10.0.0.2:4646"]);
    assert_eq!(s.current_server(), "http://10.0.0.2:4646");
    // The configured server stays, last, for when every listed one is gone.
    assert_eq!(
        s.servers(),
        [
            "http://10.0.0.2:4646",
            "http://10.0.0.3:4646",
            "http://10.0.0.1:4646"
        ]
    );
    // The next failure moves to the third; one more comes back to the
    // configured server.
    for expected in ["http://10.0.0.3:4646", "http://10.0.0.1:4646"] {
        let server = s.current_server().to_string();
        s.request_failed(Request::Heartbeat, &server, &unreachable(), now);
        assert_eq!(s.current_server(), expected);
    }
}

#[test]
fn updates_coalesce_per_allocation_and_go_out_one_window_after_the_first() {
    let t0 = Instant::now();
    let mut s = registered(t0);
    let (a, b) = (new_id(), new_id());
    assert!(s.queue_update(a, "pending", t0 + secs(1.0)));
    assert!(!s.queue_update(a, "running", t0 + secs(1.1)));
    assert!(!s.queue_update(b, "running", t0 + secs(1.2)));
    assert_eq!(s.pending_updates(), 2);
    assert_eq!(
        s.next_action(t0 + secs(1.2)),
        Action::Wait(Some(t0 + secs(1.25)))
    );
    let Action::UpdateAllocs { batch, .. } = s.next_action(t0 + secs(1.25)) else {
        panic!("the batch is due");
    };
    assert_eq!(batch, BTreeMap::from([(a, "running"), (b, "running")]));
    // Changes during the request wait for the next window.
    s.queue_update(a, "complete", t0 + secs(1.3));
    assert_eq!(
        s.next_action(t0 + secs(1.6)),
        Action::Wait(Some(t0 + secs(10.0)))
    );
    s.updates_sent(t0 + secs(1.6));
    let Action::UpdateAllocs { batch, .. } = s.next_action(t0 + secs(1.6)) else {
        panic!("the next batch is due");
    };
    assert_eq!(batch, BTreeMap::from([(a, "complete")]));
}

#[test]
fn a_failed_batch_goes_back_under_anything_newer_and_retries_after_backoff() {
    let t0 = Instant::now();
    let mut s = registered(t0);
    let (a, b) = (new_id(), new_id());
    s.queue_update(a, "running", t0);
    s.queue_update(b, "running", t0);
    let Action::UpdateAllocs { server, batch } = s.next_action(t0 + secs(0.25)) else {
        panic!("the batch is due");
    };
    s.queue_update(a, "complete", t0 + secs(0.3));
    s.updates_failed(batch, &server, &unreachable(), t0 + secs(0.4));
    assert_eq!(s.pending_updates(), 2);
    // The next server is tried after the failover pause, and new changes
    // do not cut a wait short.
    assert!(!s.queue_update(b, "failed", t0 + secs(0.42)));
    assert_eq!(
        s.next_action(t0 + secs(0.42)),
        Action::Wait(Some(t0 + secs(0.4) + FAILOVER_PAUSE))
    );
    let Action::UpdateAllocs {
        server: again,
        batch,
    } = s.next_action(t0 + secs(0.45))
    else {
        panic!("the retry is due");
    };
    assert_eq!(
        again, "http://10.0.0.2:4646",
        "the retry goes to the next server"
    );
    assert_eq!(batch, BTreeMap::from([(a, "complete"), (b, "failed")]));
    // Once every server has failed, the batch backs off.
    let mut now = t0 + secs(0.45);
    s.updates_failed(batch, &again, &unreachable(), now);
    now += FAILOVER_PAUSE;
    let Action::UpdateAllocs { server, batch } = s.next_action(now) else {
        panic!("the third server is tried");
    };
    s.updates_failed(batch, &server, &unreachable(), now);
    assert_eq!(s.next_action(now), Action::Wait(Some(now + secs(0.5))));
}

/// A dead server costs a client the failover pause, not a backoff: it
/// backs off only once every server of its list has failed since the
/// last answer, and an answer makes every server worth a try again.
#[test]
fn a_client_backs_off_only_after_every_server_failed() {
    let t0 = Instant::now();
    let mut config = SessionConfig::client(servers(3), 11);
    config.watch_allocs = false;
    let mut s = Session::new(config, t0);
    let mut now = t0;
    let mut waits = Vec::new();
    for _ in 0..5 {
        let Action::Register { server } = s.next_action(now) else {
            panic!("a registration is due at {:?}", now - t0);
        };
        s.request_failed(Request::Register, &server, &unreachable(), now);
        let Action::Wait(Some(at)) = s.next_action(now) else {
            panic!("a retry is scheduled");
        };
        waits.push(at - now);
        now = at;
    }
    let pause = FAILOVER_PAUSE;
    assert_eq!(waits, [pause, pause, secs(0.5), secs(1.0), secs(2.0)]);

    // The fourth try's server answers; the next failure moves on at once.
    let Action::Register { server } = s.next_action(now) else {
        panic!("registration due");
    };
    s.registered(&answer(secs(10.0)), now);
    now += secs(5.0);
    let Action::Heartbeat { server: first } = s.next_action(now) else {
        panic!("heartbeat due");
    };
    assert_eq!(first, server);
    s.request_failed(Request::Heartbeat, &first, &unreachable(), now);
    assert_eq!(s.next_action(now), Action::Wait(Some(now + pause)));
    // A 4xx is the same on every server: it backs off at once.
    let Action::Heartbeat { server } = s.next_action(now + pause) else {
        panic!("heartbeat retry due");
    };
    s.request_failed(
        Request::Heartbeat,
        &server,
        &Failure::Status(400, "bad".into()),
        now + pause,
    );
    assert_eq!(
        s.next_action(now + pause),
        Action::Wait(Some(now + pause + secs(0.5)))
    );
}

#[test]
fn a_batch_holds_at_most_max_batch_and_the_rest_follows_at_once() {
    let t0 = Instant::now();
    let mut config = SessionConfig::client(servers(1), 5);
    config.max_batch = 2;
    config.watch_allocs = false;
    let mut s = Session::new(config, t0);
    let _ = s.next_action(t0);
    s.registered(&answer(secs(20.0)), t0);
    for _ in 0..5 {
        s.queue_update(new_id(), "running", t0);
    }
    let mut sizes = Vec::new();
    let mut now = t0 + secs(0.25);
    while let Action::UpdateAllocs { batch, .. } = s.next_action(now) {
        sizes.push(batch.len());
        now += secs(0.01);
        s.updates_sent(now);
    }
    assert_eq!(sizes, [2, 2, 1]);
}

#[test]
fn backoff_doubles_from_half_a_second_and_stops_at_ten() {
    let client = SessionConfig::client(vec![], 0).backoff;
    let delays: Vec<Duration> = (1..=8).map(|f| client.delay(f, 0.99)).collect();
    assert_eq!(
        delays,
        [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0, 10.0].map(secs)
    );
    assert_eq!(client.delay(u32::MAX, 0.5), secs(10.0));
    let jittered = Backoff {
        jitter: secs(0.25),
        ..client
    };
    assert_eq!(jittered.delay(1, 0.0), secs(0.5));
    assert_eq!(jittered.delay(1, 0.5), secs(0.625));
    assert_eq!(jittered.delay(6, 0.9), secs(10.0));
}

#[test]
fn heartbeat_retries_back_off_and_a_success_starts_over() {
    let t0 = Instant::now();
    let mut s = registered(t0);
    let mut now = t0 + secs(10.0);
    let mut waits = Vec::new();
    for _ in 0..9 {
        let Action::Heartbeat { server } = s.next_action(now) else {
            panic!("heartbeat due at {:?}", now - t0);
        };
        s.request_failed(Request::Heartbeat, &server, &unreachable(), now);
        let Action::Wait(Some(at)) = s.next_action(now) else {
            panic!("a retry is scheduled");
        };
        // The blocking query's own schedule is not the heartbeat's.
        waits.push(at - now);
        now = at;
    }
    // The other two servers first, then backoff over the whole list.
    let p = FAILOVER_PAUSE.as_secs_f64();
    assert_eq!(waits, [p, p, 0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0].map(secs));
    assert!(matches!(s.next_action(now), Action::Heartbeat { .. }));
    s.heartbeat_answered(&answer(secs(20.0)), now);
    assert_eq!(s.next_action(now), Action::Wait(Some(now + secs(10.0))));
}

#[test]
fn shutting_down_sends_the_last_updates_at_once_and_nothing_else() {
    let t0 = Instant::now();
    let mut s = registered(t0);
    let a = new_id();
    s.queue_update(a, "running", t0);
    s.shut_down(t0 + secs(0.1));
    let Action::UpdateAllocs { batch, .. } = s.next_action(t0 + secs(0.1)) else {
        panic!("the last batch goes at once");
    };
    assert_eq!(batch.len(), 1);
    s.updates_sent(t0 + secs(0.2));
    s.allocs_answered(3, t0 + secs(0.2));
    // Later updates go without a window; no heartbeat, no query.
    assert!(s.queue_update(a, "complete", t0 + secs(0.3)));
    assert!(matches!(
        s.next_action(t0 + secs(0.3)),
        Action::UpdateAllocs { .. }
    ));
    assert_eq!(s.next_action(t0 + secs(60.0)), Action::Wait(None));
}

#[test]
fn addresses_get_a_scheme_and_lose_a_trailing_slash() {
    assert_eq!(normalize_server("127.0.0.1:4646/"), "http://127.0.0.1:4646");
    assert_eq!(normalize_server(" http://a:1 "), "http://a:1");
    assert_eq!(normalize_server("https://a:1/"), "https://a:1");
}
