# Relayed reads (src/relay.c): a value held only in a segment a client
# process hosts is read from that process (SEG.READ) for GET and the other
# commands that need its bytes. The host is another process that may stop
# answering, so the read must never hold up the event loop: the client
# that asked waits, everyone else is served (issue 25, finding 2).
#
# The host here is a stand-in living in this test process's event loop
# (like migrate.tcl's): it serves SEG.READ from ::rh(mem), or in "hold"
# mode keeps every request unanswered until rh_release, which is what a
# SIGSTOPped host looks like from the server. Requests that need the
# stand-in go through deferring clients read with read_with_timeout, which
# runs this process's event loop so the stand-in can answer. Whether
# anything waits is asserted from the server's own counters (INFO
# remote_get_in_flight, blocked_clients) and by ordering (another client's
# reply arrives while the relayed one is held), never by timing.

proc rh_start {} {
    set ::rh(mem) [pattern_bytes 1048576 23]
    set ::rh(served) 0
    set ::rh(closed) 0
    set ::rh(mode) ok
    set ::rh(held) {}
    set ::rh(nheld) 0
    set ::rh(accepts) 0
    set ::rh(listener) [socket -server rh_accept -myaddr 127.0.0.1 0]
    return [lindex [fconfigure $::rh(listener) -sockname] 2]
}

proc rh_stop {} {
    catch {close $::rh(listener)}
    foreach ch [array names ::rh_conns] { catch {close $ch} }
    array unset ::rh_conns
}

proc rh_accept {chan addr port} {
    set ::rh_conns($chan) 1
    incr ::rh(accepts)
    fconfigure $chan -translation binary -blocking 1 -buffering full
    fileevent $chan readable [list rh_serve $chan]
}

proc rh_serve {chan} {
    if {[catch {read_resp_request $chan} argv] || $argv eq {}} {
        catch {close $chan}
        unset -nocomplain ::rh_conns($chan)
        incr ::rh(closed)
        return
    }
    if {$::rh(mode) eq "hold" && [string toupper [lindex $argv 0]] eq "SEG.READ"} {
        lappend ::rh(held) [list $chan $argv]
        incr ::rh(nheld)
        return
    }
    rh_answer $chan $argv
}

# Every connection the stand-in has open, closed from its side (a host
# that dropped idle connections).
proc rh_drop_all {} {
    foreach ch [array names ::rh_conns] { catch {close $ch} }
    array unset ::rh_conns
}

proc rh_answer {chan argv} {
    switch -- [string toupper [lindex $argv 0]] {
        AUTH { puts -nonewline $chan "+OK\r\n" }
        SEG.READ {
            lassign $argv _ seg off len
            set data [string range $::rh(mem) $off [expr {$off + $len - 1}]]
            switch -- $::rh(mode) {
                garbage { puts -nonewline $chan "+OK\r\n" }
                short { puts -nonewline $chan "\$[expr {$len - 1}]\r\n[string range $data 1 end]\r\n" }
                close {
                    # Half the bytes, then gone.
                    puts -nonewline $chan "\$$len\r\n[string range $data 0 [expr {$len / 2}]]"
                    catch {close $chan}
                    unset -nocomplain ::rh_conns($chan)
                    incr ::rh(served)
                    return
                }
                default { puts -nonewline $chan "\$[string length $data]\r\n$data\r\n" }
            }
        }
        default { puts -nonewline $chan "-ERR unknown command for a hosted segment\r\n" }
    }
    flush $chan
    incr ::rh(served)
}

# Answers every held request (those whose connection the server already
# closed are dropped).
proc rh_release {} {
    set held $::rh(held)
    set ::rh(held) {}
    foreach h $held {
        lassign $h chan argv
        catch {rh_answer $chan $argv}
    }
}

# Runs this process's event loop until ::rh(var) reaches n (or 10 s pass).
proc rh_wait {var n} {
    set id [after 10000 [list set ::rh(timeout) 1]]
    set ::rh(timeout) 0
    while {!$::rh(timeout) && $::rh($var) < $n} { vwait ::rh }
    after cancel $id
    if {$::rh($var) < $n} { fail "the stand-in host never reached $var >= $n (at $::rh($var))" }
}

# Until n requests are held unanswered.
proc rh_wait_held {n} {
    set id [after 10000 [list set ::rh(timeout) 1]]
    set ::rh(timeout) 0
    while {!$::rh(timeout) && [llength $::rh(held)] < $n} { vwait ::rh }
    after cancel $id
    if {[llength $::rh(held)] < $n} { fail "the stand-in host holds [llength $::rh(held)] requests, not $n" }
}

proc rl_stat {field} {
    if {![regexp -line "^$field:(.*)\r?$" [r info] -> v]} { fail "no $field in INFO" }
    return [string trim $v]
}

# A store object of len bytes placed only on the stand-in's segment; its
# bytes (what the stand-in holds at its offset).
proc rl_put {key len args} {
    lassign [lindex [r put.start $key $len PREFER fake {*}$args] 0] seg off got
    r put.end $key
    return [string range $::rh(mem) $off [expr {$off + $len - 1}]]
}

# A command through a fresh deferring client, its reply read while the
# event loop runs (the stand-in answers meanwhile).
proc relayed {args} {
    set d [redis_deferring_client]
    $d {*}$args
    set err [catch {read_with_timeout $d} reply]
    $d close
    if {$err} { error $reply }
    return $reply
}

start_server {tags {mooncake relay} overrides {segment-size 16mb}} {
    set hport [rh_start]
    set owner [redis_client]
    $owner mount fake 1mb ENDPOINT tcp://127.0.0.1:$hport OWNER relayhost
    # Long enough that nothing here times out unless a test means it to.
    r config set remote-get-timeout 10000
    set v1 [rl_put rl:1 70000]
    set v2 [rl_put rl:2 5000]
    set v3 [rl_put rl:3 300]
    set v4 [rl_put rl:4 1]
    r set loc v

    test {A relayed GET whose host does not answer holds up only its own client} {
        set ::rh(mode) hold
        set a [redis_deferring_client]
        set b [redis_deferring_client]
        $a get rl:1
        $b get rl:2
        rh_wait_held 2
        # Both wait for the host; everyone else is served meanwhile.
        assert_equal PONG [r ping]
        assert_equal v [r get loc]
        assert_equal 2 [rl_stat remote_get_in_flight]
        assert_equal 2 [rl_stat blocked_clients]
        set ::rh(mode) ok
        rh_release
        assert_equal $v2 [read_with_timeout $b]
        assert_equal $v1 [read_with_timeout $a]
        $a close
        $b close
        list [rl_stat remote_get_in_flight] [rl_stat blocked_clients]
    } {0 0}

    test {Pipelined relayed GETs go one at a time for their client and do not add up in the loop} {
        set ::rh(mode) hold
        set a [redis_deferring_client]
        $a write "*2\r\n\$3\r\nGET\r\n\$4\r\nrl:1\r\n*2\r\n\$3\r\nGET\r\n\$4\r\nrl:2\r\n*2\r\n\$3\r\nGET\r\n\$4\r\nrl:3\r\n"
        $a flush
        foreach i {1 2 3} {
            rh_wait_held 1
            # One read in flight; the rest of a's pipeline waits in its own
            # query buffer, and the server answers others.
            assert_equal PONG [r ping]
            assert_equal 1 [rl_stat remote_get_in_flight]
            rh_release
        }
        set ::rh(mode) ok
        set got [list [read_with_timeout $a] [read_with_timeout $a] [read_with_timeout $a]]
        $a close
        assert {$got eq [list $v1 $v2 $v3]}
    }

    test {A relayed GET of a host that never answers gets -REMOTE timeout, and nothing stays held} {
        r config set remote-get-timeout 200
        set ::rh(mode) hold
        set t0 [rl_stat remote_get_timeouts]
        set a [redis_deferring_client]
        $a get rl:2
        rh_wait_held 1
        assert_equal PONG [r ping]
        assert_error {REMOTE*127.0.0.1:*timeout*} {read_with_timeout $a}
        $a close
        set ::rh(mode) ok
        set ::rh(held) {}
        r config set remote-get-timeout 10000
        assert_equal [expr {$t0 + 1}] [rl_stat remote_get_timeouts]
        list [rl_stat remote_get_in_flight] [rl_stat blocked_clients]
    } {0 0}

    test {Past remote-get-max-inflight a relayed read is refused at once with a clear error} {
        r config set remote-get-max-inflight 1
        set ::rh(mode) hold
        set r0 [rl_stat remote_get_refused]
        set a [redis_deferring_client]
        $a get rl:1
        rh_wait_held 1
        assert_error {REMOTE*too many*remote-get-max-inflight is 1*GET.REPLICAS*} {r get rl:2}
        assert_equal [expr {$r0 + 1}] [rl_stat remote_get_refused]
        set ::rh(mode) ok
        rh_release
        assert_equal $v1 [read_with_timeout $a]
        $a close
        r config set remote-get-max-inflight 64
        # 0 turns relaying off.
        r config set remote-get-max-inflight 0
        assert_error {REMOTE*remote-get-max-inflight is 0*} {r get rl:2}
        r config set remote-get-max-inflight 64
        rl_stat remote_get_in_flight
    } {0}

    test {MGET asks for all its remote values at once, at most remote-get-max-inflight-per-client in flight} {
        r config set remote-get-max-inflight-per-client 2
        set ::rh(mode) hold
        set a [redis_deferring_client]
        $a mget rl:1 loc rl:2 nosuchkey rl:3 rl:4
        rh_wait_held 2
        assert_equal 2 [rl_stat remote_get_in_flight]
        assert_equal PONG [r ping]
        rh_release
        rh_wait_held 2
        assert_equal 2 [rl_stat remote_get_in_flight]
        set ::rh(mode) ok
        rh_release
        set got [read_with_timeout $a]
        $a close
        r config set remote-get-max-inflight-per-client 8
        assert {$got eq [list $v1 v $v2 {} $v3 $v4]}
    }

    test {remote-get-max-size bounds what one command relays together} {
        r config set remote-get-max-size 72000
        set got [relayed mget rl:1 rl:2 loc]
        assert {[lindex $got 0] eq $v1}
        assert_match {REMOTE*together larger than remote-get-max-size*GET.REPLICAS*} [lindex $got 1]
        assert_equal v [lindex $got 2]
        # Alone, each fits.
        assert {[relayed get rl:2] eq $v2}
        r config set remote-get-max-size 60000
        set served $::rh(served)
        assert_error {REMOTE*(70000 bytes)*larger than remote-get-max-size*} {r get rl:1}
        assert_equal $served $::rh(served)
        r config set remote-get-max-size 64mb
        list [rl_stat remote_get_in_flight] [rl_stat blocked_clients]
    } {0 0}

    test {LCS asks for both its remote values before it blocks, once} {
        set s1 [rl_put rl:s1 40]
        set s2 [rl_put rl:s2 40]
        r set loc:s1 $s1
        r set loc:s2 $s2
        set ::rh(mode) hold
        set a [redis_deferring_client]
        $a lcs rl:s1 rl:s2
        rh_wait_held 2
        set ::rh(mode) ok
        rh_release
        set got [read_with_timeout $a]
        $a close
        assert_equal [r lcs loc:s1 loc:s2] $got
    }

    test {A client that disconnects while its read is held leaves nothing behind} {
        set ::rh(mode) hold
        set closed $::rh(closed)
        set a [redis_deferring_client]
        $a get rl:1
        rh_wait_held 1
        assert_equal 1 [rl_stat blocked_clients]
        $a close
        # The server cancels the read: its connection to the host is closed.
        rh_wait closed [expr {$closed + 1}]
        set ::rh(mode) ok
        set ::rh(held) {}
        assert_equal 0 [rl_stat remote_get_in_flight]
        assert_equal 0 [rl_stat blocked_clients]
        # Only the keyspace references the object again.
        assert_equal 1 [r object refcount rl:1]
        assert_equal PONG [r ping]
    }

    test {A write while the read is held: the command runs again and serves the new value} {
        set w1 [rl_put rl:w 100]
        set ::rh(mode) hold
        set a [redis_deferring_client]
        $a get rl:w
        rh_wait_held 1
        # Rewritten to another remote value: read again, from the new place.
        set w2 [rl_put rl:w 200 REPLACE]
        rh_release
        rh_wait_held 1
        assert_equal 1 [rl_stat remote_get_in_flight]
        # Rewritten to a value in the pool: served from there.
        r set rl:w local-now
        set ::rh(mode) ok
        rh_release
        set got [read_with_timeout $a]
        $a close
        assert_equal local-now $got
        assert {$w1 ne $w2}
    }

    test {Inside MULTI/EXEC a remote value is refused with -REMOTE, the host untouched} {
        set served $::rh(served)
        r multi
        r get rl:2
        r get loc
        r mget loc rl:3
        set res [r exec]
        assert_match {REMOTE*MULTI/EXEC*} [lindex $res 0]
        assert_equal v [lindex $res 1]
        assert_equal v [lindex [lindex $res 2] 0]
        assert_match {REMOTE*MULTI/EXEC*} [lindex [lindex $res 2] 1]
        assert_equal $served $::rh(served)
        list [rl_stat remote_get_in_flight] [rl_stat blocked_clients]
    } {0 0}

    test {Relayed reads are byte-exact: GET, GETRANGE, MGET, GETBIT, BITCOUNT, BITPOS, DUMP, COPY, SET GET, GETEX, GETDEL} {
        r set loc:1 $v1
        assert {[relayed get rl:1] eq $v1}
        assert {[relayed getrange rl:1 1000 1999] eq [string range $v1 1000 1999]}
        assert {[relayed getrange rl:1 -10 -1] eq [string range $v1 end-9 end]}
        assert {[relayed mget rl:3 loc rl:4] eq [list $v3 v $v4]}
        assert_equal [r getbit loc:1 4321] [relayed getbit rl:1 4321]
        assert_equal [r bitcount loc:1] [relayed bitcount rl:1]
        assert_equal [r bitcount loc:1 7 5000 bit] [relayed bitcount rl:1 7 5000 bit]
        assert_equal [r bitpos loc:1 1] [relayed bitpos rl:1 1]
        assert_equal [r bitpos loc:1 0 3 5000 bit] [relayed bitpos rl:1 0 3 5000 bit]
        set p [relayed dump rl:1]
        r restore rl:restored 0 $p
        assert {[r get rl:restored] eq $v1}
        assert_equal 1 [relayed copy rl:1 rl:copied]
        assert {[r get rl:copied] eq $v1}
        rl_put rl:sg 300
        set old [relayed get rl:sg]
        assert {[relayed set rl:sg new GET] eq $old}
        assert_equal new [r get rl:sg]
        set gx [rl_put rl:gx 50]
        assert {[relayed getex rl:gx EX 100] eq $gx}
        assert_range [r ttl rl:gx] 1 100
        set gd [rl_put rl:gd 50]
        assert {[relayed getdel rl:gd] eq $gd}
        assert_equal 0 [r exists rl:gd]
        list [rl_stat remote_get_in_flight] [rl_stat blocked_clients]
    } {0 0}

    test {Connections to a host are reused, and one the host closed is replaced without an error} {
        set n0 $::rh(accepts)
        foreach i {1 2 3 4 5} { assert {[relayed get rl:3] eq $v3} }
        assert_range [expr {$::rh(accepts) - $n0}] 0 1
        rh_drop_all
        set n1 $::rh(accepts)
        assert {[relayed get rl:3] eq $v3}
        assert_equal [expr {$n1 + 1}] $::rh(accepts)
    }

    test {A host that answers out of step or hangs up mid-value: -REMOTE, nothing changes} {
        foreach {mode pattern} {
            garbage {REMOTE*unexpected reply to SEG.READ*}
            short {REMOTE*unexpected reply to SEG.READ*}
            close {REMOTE*127.0.0.1:*read*}
        } {
            set ::rh(mode) $mode
            assert_error $pattern {relayed get rl:2}
            assert_error $pattern {relayed set rl:2 x GET}
        }
        set ::rh(mode) ok
        assert {[relayed get rl:2] eq $v2}
        list [rl_stat remote_get_in_flight] [rl_stat blocked_clients]
    } {0 0}

    test {A relayed command is counted once, when it runs to the end} {
        r config resetstat
        relayed get rl:3
        set calls 0
        regexp {cmdstat_get:calls=([0-9]+)} [r info commandstats] -> calls
        assert_equal 1 $calls
    }

    test {What a blocked client's reads hold counts in its memory} {
        set ::rh(mode) hold
        set a [redis_deferring_client]
        $a client setname relaymem
        $a read
        $a mget rl:4 rl:1
        rh_wait_held 2
        # The 70000-byte value comes in; the client still waits for the other.
        set big [lsearch -index {1 3} -inline $::rh(held) 70000]
        set ::rh(held) [lsearch -index {1 3} -all -inline -not $::rh(held) 70000]
        rh_answer {*}$big
        wait_for_condition 100 20 {[rl_stat remote_get_in_flight] == 1} else { fail "the read did not end" }
        set line [lsearch -inline [split [r client list] "\n"] *name=relaymem*]
        regexp {tot-mem=([0-9]+)} $line -> mem
        assert_morethan $mem 70000
        set ::rh(mode) ok
        rh_release
        set got [read_with_timeout $a]
        $a close
        assert {$got eq [list $v4 $v1]}
    }

    $owner close
    rh_stop
}

# MIGRATE reads every remote value before it talks to its target, without
# blocking the loop meanwhile; the target connection stays synchronous.
start_server {tags {mooncake relay} overrides {segment-size 16mb}} {
start_server {overrides {segment-size 16mb}} {
    set thost [srv 0 host]
    set tport [srv 0 port]
    set hport [rh_start]
    set owner [redis_client -1]
    $owner mount fake 1mb ENDPOINT tcp://127.0.0.1:$hport OWNER relayhost

    test {MIGRATE of several remote values reads them all first, serving others meanwhile} {
        set m1 [string range $::rh(mem) [lindex [lindex [r -1 put.start rl:m1 3000 PREFER fake] 0] 1] end]
        r -1 put.end rl:m1
        set m2 [string range $::rh(mem) [lindex [lindex [r -1 put.start rl:m2 4000 PREFER fake] 0] 1] end]
        r -1 put.end rl:m2
        set m1 [string range $m1 0 2999]
        set m2 [string range $m2 0 3999]
        r -1 set rl:m3 local
        set ::rh(mode) hold
        set d [redis_deferring_client -1]
        $d migrate $thost $tport "" 0 10000 KEYS rl:m1 rl:m2 rl:m3
        rh_wait_held 2
        assert_equal PONG [r -1 ping]
        assert_equal 0 [r dbsize]
        set ::rh(mode) ok
        rh_release
        assert_equal OK [read_with_timeout $d]
        $d close
        assert {[r get rl:m1] eq $m1}
        assert {[r get rl:m2] eq $m2}
        assert_equal local [r get rl:m3]
        r -1 exists rl:m1 rl:m2 rl:m3
    } {0}

    $owner close
    rh_stop
}
}
