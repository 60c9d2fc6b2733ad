# Owners whose last connection closed (owner.c, probe.c): their segments
# take no new objects at once ("orphaned") and come back with a HEARTBEAT or
# MOUNT; the server probes the host at one of the segment's endpoints and
# unmounts at once when nothing is there (refused, no such socket), keeps
# the segment when something answers (+PONG, -NOAUTH), and decides nothing
# on silence -- without blocking the event loop. A MOUNT of a name held by
# such an owner is refused and sets off a probe; owner-probe-timeout 0
# turns probing off. The stand-in hosts live in this process: a socket that
# answers, one that never does, and ports where nothing listens.
#
# owner-ttl is 60 s everywhere, so a segment that goes within seconds went
# by the probe, never by owner-ttl. Processes that really host a segment
# (libmooncake) and are SIGKILLed/SIGSTOPped: tests/python/test_owner_probe.py.

proc owner_stat {field} { get_info_field r segments $field }

# Runs this process's event loop (the stand-in hosts) for ms.
proc pump {ms} {
    after $ms {set ::__pumped 1}
    vwait ::__pumped
}

# Pumps until the expr cond (evaluated in the caller) holds; fails after ms.
proc pump_until {cond ms what} {
    set deadline [expr {[clock milliseconds] + $ms}]
    while {![uplevel 1 [list expr $cond]]} {
        if {[clock milliseconds] > $deadline} { fail "$what (after $ms ms)" }
        pump 20
    }
}

# A host that answers every connection's first bytes with reply, recording
# what it got in ::ahost(got). Returns its port.
proc answering_host {reply} {
    set ::ahost(reply) $reply
    set ::ahost(got) {}
    set ::ahost(listener) [socket -server answering_accept -myaddr 127.0.0.1 0]
    return [lindex [fconfigure $::ahost(listener) -sockname] 2]
}

proc answering_accept {chan addr port} {
    fconfigure $chan -translation binary -blocking 0
    fileevent $chan readable [list answering_read $chan]
}

proc answering_read {chan} {
    set data [read $chan]
    if {$data eq "" && [eof $chan]} {
        close $chan
        return
    }
    append ::ahost(got) $data
    puts -nonewline $chan $::ahost(reply)
    flush $chan
}

proc answering_stop {} { catch {close $::ahost(listener)} }

# A listener that accepts nothing and so never answers: the kernel completes
# the handshake and queues the probe's PING, and nobody reads it.
proc black_hole {} {
    set ::bhole [socket -server black_hole_accept -myaddr 127.0.0.1 0]
    return [lindex [fconfigure $::bhole -sockname] 2]
}
set ::bhole_conns {}
proc black_hole_accept {chan addr port} { lappend ::bhole_conns $chan }
proc black_hole_stop {} {
    catch {close $::bhole}
    foreach ch $::bhole_conns { catch {close $ch} }
    set ::bhole_conns {}
}

# A deferring client listening to __store@0__:lost, and what it heard since
# (keys of the lost objects, in order).
proc lost_listener {} {
    set c [redis_deferring_client]
    $c subscribe owners:end
    read_with_timeout $c
    $c subscribe __store@0__:lost
    read_with_timeout $c
    return $c
}
proc lost_keys {c} {
    set keys {}
    foreach m [messages_until $c owners:end] {
        set payload [lindex $m 2]
        set at [string first " key=" $payload]
        lappend keys [string range $payload [expr {$at + 5}] end]
    }
    return $keys
}

# GET.REPLICAS is {lease-ms size checksum replica...}, a replica {seg off len ...}.
proc replicas_of {key} { lrange [r get.replicas $key] 3 end }
# The segment id of key's only (or first) replica.
proc replica_seg {key} { lindex [lindex [replicas_of $key] 0] 0 }

start_server {tags {mooncake owners} overrides {segment-size 16mb owner-ttl 60000 notify-keyspace-events S}} {
    test {owner-probe-timeout: default 1000, 0 .. 3600000} {
        assert_equal {owner-probe-timeout 1000} [r config get owner-probe-timeout]
        assert_equal OK [r config set owner-probe-timeout 0]
        assert_error {ERR*} {r config set owner-probe-timeout -1}
        assert_error {ERR*} {r config set owner-probe-timeout 3600001}
        assert_equal OK [r config set owner-probe-timeout 1000]
        foreach f {owners_orphaned owner_probes owner_probes_in_flight owner_probes_alive
                   owner_probes_undecided owners_lost_by_probe owners_lost_by_ttl} {
            assert_match {[0-9]*} [owner_stat $f]
        }
    }

    test {A host that refuses connections: its segment goes at once, objects only there are lost} {
        set dead [find_available_port]
        set lost0 [owner_stat owners_lost_by_probe]
        set c [redis_client]
        set id [$c mount og-dead 1mb ENDPOINT tcp://127.0.0.1:$dead OWNER o-dead]
        r put.start k:dead 100 PREFER og-dead
        r put.end k:dead
        r put.start k:both 100 PREFER og-dead PREFER self REPLICAS 2
        r put.end k:both
        assert_equal $id [replica_seg k:dead]
        set l [lost_listener]
        set t0 [clock milliseconds]
        $c close
        wait_for_condition 150 20 {[r segment.info og-dead] eq ""} else {
            fail "segment of a host that refuses connections still mounted after 3 s"
        }
        assert_lessthan [expr {[clock milliseconds] - $t0}] 3000
        assert_equal [expr {$lost0 + 1}] [owner_stat owners_lost_by_probe]
        wait_for_condition 100 20 {[r exists k:dead] == 0} else { fail "k:dead was not dropped" }
        assert_equal {k:dead} [lost_keys $l]
        $l close
        # The object with a replica elsewhere lives on, in self only.
        assert_equal 1 [llength [replicas_of k:both]]
        assert_equal 1 [replica_seg k:both]
        assert_error {NEEDREMOUNT*} {r heartbeat o-dead}
    }

    test {A host that answers: orphaned, readable, not placed on (PREFER skipped), active again after HEARTBEAT} {
        set port [answering_host "+PONG\r\n"]
        set alive0 [owner_stat owner_probes_alive]
        set orphans0 [owner_stat owners_orphaned]
        set c [redis_client]
        set id [$c mount og-live 1mb ENDPOINT tcp://127.0.0.1:$port OWNER o-live]
        r put.start k:live 100 PREFER og-live
        r put.end k:live
        assert_equal $id [replica_seg k:live]
        $c close
        pump_until {[owner_stat owner_probes_alive] == $alive0 + 1} 5000 "the answering host's probe did not end"
        # The probe sent a plain PING: no credentials.
        assert_equal "*1\r\n\$4\r\nPING\r\n" $::ahost(got)
        assert_equal orphaned [dict get [r segment.info og-live] state]
        set listed {}
        foreach s [r segments] { if {[dict get $s name] eq "og-live"} { set listed [dict get $s state] } }
        assert_equal orphaned $listed
        assert_match "*name=og-live,*state=orphaned" [get_info_field r segments segment_$id]
        assert_equal [expr {$orphans0 + 1}] [owner_stat owners_orphaned]
        # Its object stays readable; new ones go elsewhere, PREFER included.
        assert_equal $id [replica_seg k:live]
        set rep [r put.start k:new 100 PREFER og-live]
        assert_equal 1 [lindex [lindex $rep 0] 0]
        r put.end k:new
        for {set i 0} {$i < 20} {incr i} {
            r put.start k:n$i 100
            r put.end k:n$i
            assert_equal 1 [replica_seg k:n$i]
        }
        # The owner is back: placeable again.
        set h [redis_client]
        assert_equal OK [$h heartbeat o-live]
        assert_equal active [dict get [r segment.info og-live] state]
        assert_equal $orphans0 [owner_stat owners_orphaned]
        r put.start k:back 100 PREFER og-live
        r put.end k:back
        assert_equal $id [replica_seg k:back]
        # GRACEFUL wins over orphaned in what is shown.
        $h close
        pump_until {[owner_stat owner_probes_alive] == $alive0 + 2} 5000 "the second probe did not end"
        assert_equal orphaned [dict get [r segment.info og-live] state]
        r unmount og-live GRACEFUL 600000
        assert_equal draining [dict get [r segment.info og-live] state]
        r unmount og-live
        answering_stop
    }

    test {-NOAUTH is proof of life} {
        set port [answering_host "-NOAUTH Authentication required.\r\n"]
        set alive0 [owner_stat owner_probes_alive]
        set c [redis_client]
        $c mount og-auth 1mb ENDPOINT tcp://127.0.0.1:$port OWNER o-auth
        $c close
        pump_until {[owner_stat owner_probes_alive] == $alive0 + 1} 5000 "the probe did not end"
        assert_equal orphaned [dict get [r segment.info og-auth] state]
        r unmount og-auth
        answering_stop
    }

    test {MOUNT by the same owner brings an orphan back under the same id} {
        set port [answering_host "+PONG\r\n"]
        set alive0 [owner_stat owner_probes_alive]
        set c [redis_client]
        set id [$c mount og-re 1mb ENDPOINT tcp://127.0.0.1:$port OWNER o-re]
        $c close
        pump_until {[owner_stat owner_probes_alive] == $alive0 + 1} 5000 "the probe did not end"
        set d [redis_client]
        assert_equal $id [$d mount og-re 1mb OWNER o-re]
        assert_equal active [dict get [r segment.info og-re] state]
        $d unmount og-re
        $d close
        answering_stop
    }

    test {A probe to a black hole does not block the event loop and decides nothing} {
        r config set owner-probe-timeout 2000
        set port [black_hole]
        set undecided0 [owner_stat owner_probes_undecided]
        set c [redis_client]
        $c mount og-bh 1mb ENDPOINT tcp://127.0.0.1:$port OWNER o-bh
        $c close
        wait_for_condition 100 10 {[owner_stat owner_probes_in_flight] == 1} else {
            fail "no probe in flight"
        }
        # Pending for 2 s: meanwhile everything else is served at once.
        after 100
        set t0 [clock milliseconds]
        assert_equal PONG [r ping]
        r put.start k:meanwhile 100
        r put.end k:meanwhile
        assert_lessthan [expr {[clock milliseconds] - $t0}] 500
        assert_equal 1 [owner_stat owner_probes_in_flight]
        wait_for_condition 100 50 {[owner_stat owner_probes_undecided] == $undecided0 + 1} else {
            fail "the black hole's probe did not time out"
        }
        assert_equal 0 [owner_stat owner_probes_in_flight]
        # Silence: the segment stays (owner-ttl decides), taking nothing new.
        assert_equal orphaned [dict get [r segment.info og-bh] state]
        r unmount og-bh
        black_hole_stop
        r config set owner-probe-timeout 1000
    }

    test {owner-probe-timeout 0: no probe; MOUNT of the name by another owner is refused, then sets off a probe} {
        r config set owner-probe-timeout 0
        set dead [find_available_port]
        set probes0 [owner_stat owner_probes]
        set c [redis_client]
        set id [$c mount og-taken 1mb ENDPOINT tcp://127.0.0.1:$dead OWNER o-old]
        $c close
        after 300
        assert_equal orphaned [dict get [r segment.info og-taken] state]
        assert_equal $probes0 [owner_stat owner_probes]
        set n [redis_client]
        assert_error {EXISTS*no open connection*owner-ttl*} {$n mount og-taken 1mb OWNER o-new}
        # With probing on, the refused MOUNT asks the holder's host: it is
        # gone, so the name is free in a moment.
        r config set owner-probe-timeout 1000
        assert_error {EXISTS*no open connection*probed*retry*} {$n mount og-taken 1mb OWNER o-new}
        assert_equal [expr {$probes0 + 1}] [owner_stat owner_probes]
        wait_for_condition 150 20 {[r segment.info og-taken] eq ""} else {
            fail "the old owner's segment is still mounted"
        }
        assert_morethan [$n mount og-taken 1mb OWNER o-new] $id
        assert_equal o-new [dict get [r segment.info og-taken] owner]
        $n unmount og-taken
        $n close
    }

    test {An abstract unix:// endpoint no one listens on, mounted from this machine: gone} {
        set lost0 [owner_stat owners_lost_by_probe]
        set c [redis_client]
        # The tcp one is never tried: unix first on the same machine.
        $c mount og-unix 1mb ENDPOINT tcp://192.0.2.1:7000 ENDPOINT unix://@mc-probe-nobody-[pid] OWNER o-unix
        $c close
        wait_for_condition 150 20 {[r segment.info og-unix] eq ""} else {
            fail "segment with a missing unix socket still mounted after 3 s"
        }
        assert_equal [expr {$lost0 + 1}] [owner_stat owners_lost_by_probe]
    }

    test {Endpoints a probe must not ask: another machine's unix/loopback ones, rdma://, host names, an address the MOUNT did not come from} {
        set dead [find_available_port]
        set probes0 [owner_stat owner_probes]
        set c [redis_client]
        # HOST names another machine: its unix socket and its loopback are not ours.
        $c mount og-far 1mb ENDPOINT unix:///nonexistent/mc-probe.sock ENDPOINT tcp://127.0.0.1:$dead \
            HOST some-other-machine OWNER o-far
        $c mount og-odd 1mb ENDPOINT rdma://127.0.0.1:$dead ENDPOINT tcp://localhost.invalid:$dead OWNER o-odd
        # A socket file: its permissions are not the server's to lend.
        $c mount og-path 1mb ENDPOINT unix:///nonexistent/mc-probe.sock OWNER o-path
        # A remote numeric address other than the one the MOUNT came from
        # (127.0.0.1): the server does not connect where a client points it.
        $c mount og-elsewhere 1mb ENDPOINT tcp://192.0.2.1:$dead HOST some-other-machine OWNER o-elsewhere
        $c close
        after 300
        assert_equal orphaned [dict get [r segment.info og-far] state]
        assert_equal orphaned [dict get [r segment.info og-odd] state]
        assert_equal orphaned [dict get [r segment.info og-elsewhere] state]
        assert_equal orphaned [dict get [r segment.info og-path] state]
        assert_equal $probes0 [owner_stat owner_probes]
        r unmount og-far
        r unmount og-odd
        r unmount og-elsewhere
        r unmount og-path
    }
}

# Owners that die together: each finds its own segments, not every
# segment (owner.c), so a process that mounted many under as many owners
# and died costs O(its segments) to reap, not O(segments^2).
start_server {tags {mooncake owners} overrides {segment-size 16mb owner-ttl 100 owner-probe-timeout 0}} {
    test {Reaping many dead owners looks only at their own segments} {
        set n 300
        set base [owner_stat owners]
        set segs [owner_stat segments]
        set lost0 [owner_stat owners_lost_by_ttl]
        set c [redis_deferring_client]
        for {set i 0} {$i < $n} {incr i} { $c mount reap-seg$i 1mb OWNER reap-owner$i }
        for {set i 0} {$i < $n} {incr i} { $c read }
        assert_equal [expr {$base + $n}] [owner_stat owners]
        r debug visits reset
        $c close
        wait_for_condition 200 20 {[owner_stat owners] == $base} else {
            fail "the dead owners were not reaped"
        }
        assert_equal [expr {$lost0 + $n}] [owner_stat owners_lost_by_ttl]
        assert_equal $segs [owner_stat segments]
        # One visit per segment reaped (the table has 300 more: a pass over
        # it per owner would be 90000).
        assert_equal $n [dict get [r debug visits] owner-segments]
    }

    test {A connection holding many owners finds each in O(1) (MOUNT, HEARTBEAT, UNMOUNT)} {
        set n 300
        set base [owner_stat owners]
        r debug visits reset
        set c [redis_deferring_client]
        for {set i 0} {$i < $n} {incr i} { $c mount many-seg$i 1mb OWNER many-owner$i }
        for {set i 0} {$i < $n} {incr i} { $c read }
        for {set i 0} {$i < $n} {incr i} { $c heartbeat many-owner$i }
        for {set i 0} {$i < $n} {incr i} { assert_equal OK [$c read] }
        # Its own UNMOUNT of an owner's last segment lets go of that owner.
        for {set i 0} {$i < $n} {incr i 2} { $c unmount many-seg$i }
        for {set i 0} {$i < $n} {incr i 2} { $c read }
        assert_equal [expr {$base + $n / 2}] [owner_stat owners]
        $c heartbeat many-owner1
        assert_equal OK [$c read]
        $c heartbeat many-owner0
        assert_error {NEEDREMOUNT*} {$c read}
        # A scan per MOUNT and HEARTBEAT would be ~135000.
        assert_lessthan [dict get [r debug visits] client-owners] [expr {5 * $n}]
        $c close
        wait_for_condition 200 20 {[owner_stat owners] == $base} else {
            fail "the owners were not reaped"
        }
    }
}
