# Client segments across a server restart (detached.c, aof.c's SEGMENT and
# PLACED records, MOUNT IDENTITY): objects whose bytes live in a client
# process's memory come back, at the same places, once the owner mounts
# the segment again with the identity it mounted it with; never otherwise,
# and never over a newer version of their key. The hosts here are names
# only (nothing listens at their endpoints), so probes are off: whether a
# host is alive is not what these tests are about (owners.tcl,
# test_owner_probe.py). A real host process riding through a restart:
# tests/python/test_reattach.py.

set ::ident 00112233445566778899aabbccddeeff

proc dfield {f} { get_info_field r persistence $f }
# A put into seg (no bytes move: the segment is a name), with a checksum.
proc seg_put {key size seg args} {
    set reps [r put.start $key $size PREFER $seg REPLICAS 1 {*}$args]
    assert_equal [dict get [r segment.info $seg] id] [lindex $reps 0 0]
    assert_equal OK [r put.end $key CHECKSUM sum:$key]
    return [lindex $reps 0]
}

tags {aof reattach} {

start_server {overrides {appendonly yes appendfsync always owner-probe-timeout 0 segment-size 16mb}} {
    test {Objects of a segment mounted with IDENTITY come back after kill -9, at their places, once it is mounted again with it} {
        set id [r mount hostseg 1mb OWNER w1 IDENTITY $::ident ENDPOINT tcp://127.0.0.1:9]
        set p1 [seg_put k1 1000 hostseg]
        set p2 [seg_put k2 5000 hostseg]
        r pin k2 HARD
        # A soft pin's deadline: the log keeps it as the wall clock's (the
        # server holds it on its monotonic clock, which a restart resets).
        r pin k1 600000
        set p3 [seg_put k3 300 hostseg]
        r expire k3 1000
        seg_put gone 100 hostseg
        r del gone
        r set plain v
        set used [dict get [r segment.info hostseg] used]
        restart_server 0 kill
        # Held aside: not keys, and the segment takes and serves nothing.
        assert_equal {plain} [lsort [r keys *]]
        assert_equal 0 [r exists k1]
        assert_equal {} [r get.replicas k1]
        assert_equal detached [dict get [r segment.info hostseg] state]
        assert_equal $id [dict get [r segment.info hostseg] id]
        assert_equal 3 [dfield detached_objects]
        assert_equal 1 [dfield detached_segments]
        assert_error {NEEDREMOUNT*IDENTITY*} {r heartbeat w1}
        # PREFER passes it over, as any segment that takes nothing new.
        assert_equal 1 [lindex [r put.start new 100 PREFER hostseg REPLICAS 1] 0 0]
        r put.revoke new
        # The owner proves it (hex digits compared case-blind): same id,
        # same places, checksums, pins and TTLs.
        assert_equal $id [r mount hostseg 1mb OWNER w1 IDENTITY [string toupper $::ident] ENDPOINT tcp://127.0.0.1:9]
        assert_equal active [dict get [r segment.info hostseg] state]
        assert_equal {k1 k2 k3 plain} [lsort [r keys *]]
        assert_equal $p1 [lindex [r get.replicas k1] 3]
        assert_equal $p2 [lindex [r get.replicas k2] 3]
        assert_equal $p3 [lindex [r get.replicas k3] 3]
        assert_equal sum:k1 [lindex [r get.replicas k1] 2]
        assert_equal hard [dict get [r object.info k2] pin]
        assert_equal soft [dict get [r object.info k1] pin]
        assert_range [dict get [r object.info k1] pin-ms] 500000 600000
        assert_range [r ttl k3] 900 1000
        assert_equal $used [dict get [r segment.info hostseg] used]
        assert_equal 0 [dfield detached_objects]
        assert_equal 3 [dfield reattached_objects]
        assert_equal OK [r heartbeat w1]
        # New puts land beside them, never over them.
        set p4 [lindex [r put.start k4 2000 PREFER hostseg REPLICAS 1] 0]
        foreach p [list $p1 $p2 $p3] {
            set a [lindex $p 1]; set alen [lindex $p 2]
            set b [lindex $p4 1]
            assert {$b + 2000 <= $a || $a + $alen <= $b}
        }
        r put.revoke k4
    }

    test {A restart after the re-attach, and after a rewrite while objects are held, keeps them re-attachable} {
        restart_server 0 kill
        assert_equal 3 [dfield detached_objects]
        r bgrewriteaof
        wait_for_condition 100 50 {
            [get_info_field r persistence aof_rewrite_in_progress] == 0 &&
            [get_info_field r persistence aof_last_bgrewrite_status] eq "ok"
        } else { fail "rewrite did not finish" }
        restart_server 0 kill
        assert_equal 3 [dfield detached_objects]
        r mount hostseg 1mb OWNER w1 IDENTITY $::ident ENDPOINT tcp://127.0.0.1:9
        assert_equal {k1 k2 k3 plain} [lsort [r keys *]]
    }

    test {A key written after the restart wins over the held version; a held one is not a key to delete} {
        r flushall
        r mount nseg2 1mb OWNER w3 IDENTITY $::ident ENDPOINT tcp://127.0.0.1:9
        foreach k {a b c d} { seg_put $k 100 nseg2 }
        restart_server 0 kill
        assert_equal 4 [dfield detached_objects]
        r set a pool-version
        r put.start b 200 PREFER nseg2 ;# passed over while detached: the pool takes it
        r put.end b
        r rename a d ;# d's held version is older than what RENAME puts there
        assert_equal 1 [dfield detached_objects]
        # DEL of a held key finds no key (0), as for any key that is not there.
        assert_equal 0 [r del c]
        r mount nseg2 1mb OWNER w3 IDENTITY $::ident ENDPOINT tcp://127.0.0.1:9
        assert_equal pool-version [r get d]
        assert_equal 0 [r exists a]
        assert_equal 200 [lindex [r get.replicas b] 1]
        assert_equal 100 [lindex [r get.replicas c] 1]
        # FLUSHALL while held: nothing comes back.
        restart_server 0 kill
        assert_equal 1 [dfield detached_objects] ;# c (b and d are in the pool now)
        r flushall
        assert_equal 0 [dfield detached_objects]
        r mount nseg2 1mb OWNER w3 IDENTITY $::ident ENDPOINT tcp://127.0.0.1:9
        assert_equal 0 [r dbsize]
    }
}

start_server {overrides {appendonly yes appendfsync always owner-probe-timeout 0}} {
    test {Without its identity, with another, or under another owner, a segment's objects never come back} {
        set other ffeeddccbbaa99887766554433221100
        foreach {seg owner} {s1 o1 s2 o2 s3 o3} {
            r mount $seg 1mb OWNER $owner IDENTITY $::ident ENDPOINT tcp://127.0.0.1:9
            seg_put key:$seg 100 $seg
        }
        set id1 [dict get [r segment.info s1] id]
        restart_server 0 kill
        assert_equal 3 [dfield detached_objects]
        # No identity: new memory, a new id, the objects gone.
        set new1 [r mount s1 1mb OWNER o1 ENDPOINT tcp://127.0.0.1:9]
        assert {$new1 != $id1}
        assert_equal active [dict get [r segment.info s1] state]
        # Another identity (a new process under the same owner name).
        r mount s2 1mb OWNER o2 IDENTITY $other ENDPOINT tcp://127.0.0.1:9
        assert_equal 0 [r exists key:s1]
        assert_equal 0 [r exists key:s2]
        assert_equal 2 [dfield detached_objects_lost]
        # Another owner: the name is held by an owner with no connection.
        assert_error {EXISTS*another owner*} {r mount s3 1mb OWNER intruder IDENTITY $::ident}
        assert_equal 1 [dfield detached_objects]
        # Its own owner, with its identity: back.
        r mount s3 1mb OWNER o3 IDENTITY $::ident ENDPOINT tcp://127.0.0.1:9
        assert_equal 1 [r exists key:s3]
        assert_equal 0 [dfield detached_objects]
    }

    test {A segment mounted without IDENTITY is not in the log: its objects are forgotten, not held} {
        r flushall
        r mount plainseg 1mb OWNER p1 ENDPOINT tcp://127.0.0.1:9
        seg_put nolog 100 plainseg
        assert_equal 1 [dfield aof_segment_objects_not_logged]
        restart_server 0 kill
        assert_equal 0 [dfield detached_objects]
        assert_equal {} [r segment.info plainseg]
        assert_equal 0 [r exists nolog]
    }

    test {IDENTITY is checked like a token} {
        assert_error {*invalid IDENTITY*} {r mount bad 1mb IDENTITY 1234}
        assert_error {*invalid IDENTITY*} {r mount bad 1mb IDENTITY [string repeat g 32]}
        assert_error {*invalid IDENTITY*} {r mount bad 1mb IDENTITY [string repeat a 129]}
        assert_equal {} [r segment.info bad]
    }
}

start_server {overrides {appendonly yes appendfsync always owner-probe-timeout 0 owner-ttl 300}} {
    test {A segment whose owner never comes back goes after owner-ttl, and its objects with it} {
        r mount ttlseg 1mb OWNER gone IDENTITY $::ident ENDPOINT tcp://127.0.0.1:9
        seg_put t1 100 ttlseg
        seg_put t2 100 ttlseg
        restart_server 0 kill
        assert_equal 2 [dfield detached_objects]
        wait_for_condition 100 50 {
            [r segment.info ttlseg] eq {}
        } else { fail "the detached segment did not go after owner-ttl" }
        assert_equal 0 [dfield detached_objects]
        assert_equal 2 [dfield detached_objects_lost]
        # And the log says so: after another restart there is nothing to hold.
        restart_server 0 kill
        assert_equal 0 [dfield detached_objects]
        assert_equal {} [r segment.info ttlseg]
    }
}

}
