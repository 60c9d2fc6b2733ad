# busy-poll-us: after handling events the loop polls for more instead of
# sleeping at once; it never spins while idle, and timers still fire while
# it polls. CPU time (INFO cpu) tells spinning from sleeping.

proc server_cpu {} {
    set info [r info cpu]
    regexp {used_cpu_sys:([0-9.]+)} $info -> sys
    regexp {used_cpu_user:([0-9.]+)} $info -> user
    expr {$sys + $user}
}

proc expired_keys {} {
    regexp {expired_keys:([0-9]+)} [r info stats] -> n
    return $n
}

# No pre-faulting thread: its CPU time would blur the idle measurement.
start_server {tags {busypoll} overrides {segment-size 16mb segment-prefault no}} {
    test {busy-poll-us defaults to 50 and takes 0 .. 1000000} {
        assert_equal {busy-poll-us 50} [r config get busy-poll-us]
        assert_equal OK [r config set busy-poll-us 0]
        assert_equal OK [r config set busy-poll-us 1000000]
        assert_error {ERR CONFIG SET failed*} {r config set busy-poll-us -1}
        assert_error {ERR CONFIG SET failed*} {r config set busy-poll-us 1000001}
        assert_equal {busy-poll-us 1000000} [r config get busy-poll-us]
        r config set busy-poll-us 50
        lindex [r config get busy-poll-us] 1
    } {50}

    test {An idle server does not spin (busy-poll-us 50)} {
        r ping
        set before [server_cpu]
        after 1000
        set spent [expr {[server_cpu] - $before}]
        assert_lessthan $spent 0.15
    }

    test {After a request the server polls for busy-poll-us before sleeping} {
        r config set busy-poll-us 900000
        set before [server_cpu]
        r ping
        after 1000
        set spent [expr {[server_cpu] - $before}]
        r config set busy-poll-us 50
        # ~0.9 s of polling after each of the two requests; allow for a
        # loaded machine taking the CPU away.
        assert_morethan $spent 0.3
    }

    test {Timers (active expiry) still run while the loop polls} {
        r config set busy-poll-us 1000000
        set before [expired_keys]
        r set bp:key v px 50
        # The expiry cycle must find the key without anyone touching it.
        wait_for_condition 40 50 {
            [expired_keys] > $before
        } else {
            r config set busy-poll-us 50
            fail "the key did not expire while the server polled"
        }
        r config set busy-poll-us 50
        r exists bp:key
    } {0}

    test {Sparse traffic: the loop backs off from windows that keep ending empty} {
        # Requests 15 ms apart, 5 ms windows: every window ends empty. A
        # fixed spin would poll all 40 (200 ms); backing off skips about
        # half of the first 40 and, later, all but one in 256.
        r config set busy-poll-us 5000
        set w0 [get_info_field r stats busy_poll_wasted_usec]
        for {set i 0} {$i < 40} {incr i} {
            r ping
            after 15
        }
        set wasted [expr {[get_info_field r stats busy_poll_wasted_usec] - $w0}]
        assert_morethan $wasted 0
        assert_lessthan $wasted 150000
        # Back-to-back requests are caught by the spin again at once.
        set c0 [get_info_field r stats busy_poll_caught]
        set rd [redis_deferring_client]
        for {set i 0} {$i < 200} {incr i} {
            $rd ping
            $rd flush
            $rd read
        }
        $rd close
        assert_morethan [get_info_field r stats busy_poll_caught] $c0
        r config set busy-poll-us 50
    }

    test {busy-poll-us 0 still serves requests} {
        r config set busy-poll-us 0
        r set bp:a 1
        set v [r get bp:a]
        r config set busy-poll-us 50
        set v
    } {1}
}
