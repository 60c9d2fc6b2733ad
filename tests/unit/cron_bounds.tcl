# What one cron tick costs as the server grows. Every cron's per-tick work
# is bounded by a constant or by what is due, never by how many segments,
# owners or connections there are: DEBUG VISITS counts the entries each
# looked at (cron-segments, cron-owners) and the ticks that ran
# (cron-ticks), so these tests assert work per tick, nothing timed.

proc cb_visits {kind} { dict get [r debug visits] $kind }

start_server {tags {mooncake} overrides {owner-probe-timeout 0 owner-ttl 600000}} {
    # 2000 segments under as many owners, on one open connection (libmooncake
    # names an owner after its segment), and 20 orphans.
    set host [redis_client]
    for {set i 0} {$i < 2000} {incr i} { $host mount cb-$i 1048576 OWNER cb-owner-$i }
    set gone [redis_client]
    for {set i 0} {$i < 20} {incr i} { $gone mount cb-orphan-$i 1048576 OWNER cb-orphan-owner-$i }
    $gone close
    wait_for_condition 100 20 {[get_info_field r segments owners_orphaned] == 20} else {
        fail "the orphans were not counted"
    }

    test {The eviction cron looks at a bounded number of segments a tick, however many are mounted} {
        assert_equal OK [r debug visits reset]
        wait_cron_ticks 3
        set ticks [cb_visits cron-ticks]
        assert_morethan_equal $ticks 3
        # The pool and 64 slots of the table a tick, plus the sentinel's
        # drain (wait_cron_ticks); the old check walked all 2021 every tick.
        assert_lessthan_equal [cb_visits cron-segments] [expr {$ticks * 70}]
    }

    test {ownerCron looks at the orphans that are due and one more, not at every owner} {
        assert_equal OK [r debug visits reset]
        wait_cron_ticks 3
        set ticks [cb_visits cron-ticks]
        assert_morethan_equal $ticks 3
        # Nobody is due: the oldest orphan is looked at, once a tick (the
        # sentinel's owner has a connection). The old cron walked 2022.
        assert_lessthan_equal [cb_visits cron-owners] [expr {$ticks * 2}]
        assert_equal 20 [get_info_field r segments owners_orphaned]
    }

    test {Orphans die by owner-ttl oldest first, each looked at about once} {
        r config set owner-ttl 0
        assert_equal OK [r debug visits reset]
        wait_for_condition 100 20 {[get_info_field r segments owners_orphaned] == 0} else {
            fail "orphans past owner-ttl were not reaped"
        }
        assert_equal {} [r segment.info cb-orphan-7]
        # The 2000 live owners keep their segments.
        assert_equal active [dict get [r segment.info cb-1999] state]
        wait_cron_ticks 1
        set ticks [cb_visits cron-ticks]
        assert_lessthan_equal [cb_visits cron-owners] [expr {20 + 2 * $ticks}]
        r config set owner-ttl 600000
    }

    test {Drains under way cost the cron the due ones and one more, not a walk of the table} {
        for {set i 0} {$i < 10} {incr i} { assert_equal 0 [$host unmount cb-$i graceful 600000] }
        assert_equal OK [r debug visits reset]
        wait_cron_ticks 3
        set ticks [cb_visits cron-ticks]
        assert_lessthan_equal [cb_visits cron-segments] [expr {$ticks * 70}]
        assert_equal draining [dict get [r segment.info cb-3] state]
    }

    test {Drains end in deadline order; a closer deadline is kept, a later one is not} {
        assert_equal 0 [$host unmount cb-100 graceful 600000]
        assert_equal 0 [$host unmount cb-101 graceful 100]
        assert_equal 0 [$host unmount cb-102 graceful 600000]
        # Re-issued: a closer deadline wins, a later one changes nothing.
        assert_equal 0 [$host unmount cb-102 graceful 50]
        assert_equal 0 [$host unmount cb-101 graceful 600000]
        wait_for_condition 100 50 {[r segment.info cb-101] eq "" && [r segment.info cb-102] eq ""} else {
            fail "the due drains did not end"
        }
        assert_equal draining [dict get [r segment.info cb-100] state]
        assert_equal draining [dict get [r segment.info cb-5] state]
        # An UNMOUNT at once of a draining segment takes it off the heap too.
        assert_equal 0 [$host unmount cb-5]
        assert_equal {} [r segment.info cb-5]
        assert_equal 0 [$host unmount cb-100 graceful 0]
        wait_for_condition 100 50 {[r segment.info cb-100] eq ""} else {
            fail "GRACEFUL 0 did not end the drain"
        }
        assert_equal draining [dict get [r segment.info cb-9] state]
    }

    $host close
}

start_server {tags {mooncake}} {
    test {CLIENT LIST ID finds a connection in O(1), however many are open} {
        set clients {}
        for {set i 0} {$i < 200} {incr i} { lappend clients [redis_client] }
        set ids {}
        foreach c $clients { lappend ids [$c client id] }
        assert_equal OK [r debug visits reset]
        foreach id $ids { assert_match "id=$id *" [r client list id $id] }
        # One lookup each; the old walk looked at ~100 connections each.
        assert_equal 200 [cb_visits clients-by-id]
        # A closed connection is no longer found.
        set last [lindex $clients end]
        set lastid [lindex $ids end]
        $last close
        wait_for_condition 100 20 {[r client list id $lastid] eq ""} else {
            fail "a closed connection is still listed"
        }
        foreach c [lrange $clients 0 end-1] { $c close }
    }
}
