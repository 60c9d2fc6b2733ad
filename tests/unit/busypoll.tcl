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

proc bp_field {f} { get_info_field r stats busy_poll_$f }

# No pre-faulting thread: its CPU time would blur the idle measurement.
start_server {tags {busypoll} overrides {segment-size 16mb segment-prefault no}} {
    # The governor (server.c) decides from the host's load whether spinning
    # pays; these tests are about the spin itself, so they tell it the host
    # is idle (1 task runnable on 2 CPUs) whatever this machine's load is.
    r debug busypoll sample 1 2 0 0

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
        set before [bp_field wasted_usec]
        r ping
        after 1000
        # The window is kept by the clock, not by the CPU the server got:
        # a loaded machine that takes the core away does not shorten it
        # (INFO cpu did, and this test failed under load). ~0.9 s of it ran
        # empty; timers cut it in pieces, and the INFO below ends it.
        set wasted [expr {[bp_field wasted_usec] - $before}]
        r config set busy-poll-us 50
        assert_morethan $wasted 300000
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

    test {The busy-poll decision is in INFO and follows the load} {
        r config set busy-poll-us 50
        r debug busypoll sample 1 2 0 0
        assert_equal 1 [bp_field active]
        assert_equal idle-cores [bp_field reason]
        assert_equal 1.00 [bp_field runnable]
        assert_equal 2 [bp_field cpus]
        # A node and its client on two cores: still pays.
        r debug busypoll sample 2.5 2 0 0
        assert_equal 1 [bp_field active]
        # Three spinning nodes and a client on two cores: every spun
        # microsecond is another process's.
        r debug busypoll sample 4 2 0 0
        assert_equal 0 [bp_field active]
        assert_equal cores-busy [bp_field reason]
        assert_equal 4.00 [bp_field runnable]
        # One core, a node and its client: no.
        r debug busypoll sample 2 1 0 0
        assert_equal cores-busy [bp_field reason]
        # The host quietens: spinning again at the next step.
        r debug busypoll sample 0.5 2 0 0
        list [bp_field active] [bp_field reason]
    } {1 idle-cores}

    test {While the governor says no, no polling window opens} {
        r config set busy-poll-us 1000000
        r debug busypoll sample 4 2 0 0
        set w0 [bp_field wasted_usec]
        set c0 [bp_field caught]
        set rd [redis_deferring_client]
        for {set i 0} {$i < 50} {incr i} {
            $rd ping
            $rd flush
            $rd read
        }
        $rd close
        r ping
        # With windows of a second each, any window opened would show.
        set w [expr {[bp_field wasted_usec] - $w0}]
        set c [expr {[bp_field caught] - $c0}]
        r debug busypoll sample 1 2 0 0
        r config set busy-poll-us 50
        list $w $c
    } {0 0}

    test {Spins that mostly waste turn spinning off, for longer each time} {
        r config set busy-poll-us 50
        r debug busypoll sample 1 2 0 0
        # A tenth of a core wasted, and over 200 us per event caught.
        r debug busypoll sample 1 2 300000 10
        assert_equal wasteful [bp_field reason]
        assert_equal 0 [bp_field active]
        # Off for one second (this step), then probing again.
        r debug busypoll sample 1 2 0 0
        assert_equal 1 [bp_field active]
        # Wasteful again straight after: off for two seconds now.
        r debug busypoll sample 1 2 300000 10
        r debug busypoll sample 1 2 0 0
        assert_equal wasteful [bp_field reason]
        r debug busypoll sample 1 2 0 0
        assert_equal 1 [bp_field active]
        # A second that paid (many catches for the time spent) resets it.
        r debug busypoll sample 1 2 300000 100000
        assert_equal idle-cores [bp_field reason]
        r debug busypoll sample 1 2 300000 10
        r debug busypoll sample 1 2 0 0
        list [bp_field active] [bp_field reason]
    } {1 idle-cores}

    test {busy-poll-us 0 is "disabled" whatever the load; a value turns it back on} {
        r debug busypoll sample 1 2 0 0
        r config set busy-poll-us 0
        assert_equal {0 disabled} [list [bp_field active] [bp_field reason]]
        r debug busypoll sample 1 2 0 0
        assert_equal {0 disabled} [list [bp_field active] [bp_field reason]]
        r config set busy-poll-us 50
        list [bp_field active] [bp_field reason]
    } {1 idle-cores}

    test {busy-poll-auto no: spinning whatever the load} {
        assert_equal {busy-poll-auto yes} [r config get busy-poll-auto]
        r config set busy-poll-auto no
        r debug busypoll sample 9 2 300000 0
        assert_equal {1 always} [list [bp_field active] [bp_field reason]]
        r config set busy-poll-auto yes
        r debug busypoll sample 9 2 0 0
        list [bp_field active] [bp_field reason]
    } {0 cores-busy}

    test {appendfsync always: no spinning (each iteration ends in an fsync); everysec spins again} {
        r config set appendonly yes
        r config set appendfsync always
        r debug busypoll sample 1 2 0 0
        assert_equal {0 fsync-always} [list [bp_field active] [bp_field reason]]
        assert_equal OK [r set bp:k v]
        r config set appendfsync everysec
        r debug busypoll sample 1 2 0 0
        assert_equal {1 idle-cores} [list [bp_field active] [bp_field reason]]
        r config set appendfsync always
        r config set appendonly no
        r debug busypoll sample 1 2 0 0
        list [bp_field active] [bp_field reason]
    } {1 idle-cores}

    test {DEBUG BUSYPOLL refuses bad inputs and changes nothing} {
        r debug busypoll sample 4 2 0 0
        assert_error {ERR value is out of range*} {r debug busypoll sample -1 2 0 0}
        assert_error {ERR value is out of range*} {r debug busypoll sample 1 0 0 0}
        assert_error {ERR value is out of range*} {r debug busypoll sample x 2 0 0}
        assert_error {ERR value is out of range*} {r debug busypoll sample 1 2 -5 0}
        assert_error {ERR*} {r debug busypoll sample 1 2 0}
        list [bp_field active] [bp_field reason]
    } {0 cores-busy}

    test {DEBUG BUSYPOLL AUTO: the cron reads the host's load again} {
        r debug busypoll sample 9 1 0 0
        r debug busypoll auto
        # Within a couple of seconds a step from real readings replaces the
        # made-up one: the CPU count is this machine's, not 1 or 2 faked.
        set want [exec nproc]
        wait_for_condition 50 100 {
            [bp_field cpus] == $want
        } else {
            fail "busy_poll_cpus stayed [bp_field cpus], nproc says $want"
        }
        assert_morethan [bp_field runnable] 0
        assert {[bp_field reason] in {idle-cores cores-busy wasteful}}
    }
}
