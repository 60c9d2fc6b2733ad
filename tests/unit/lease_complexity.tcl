# The work a connection's read grants cost (issue 27, item 1), counted by
# DEBUG VISITS rather than timed: a grant, a release and the pruning of an
# expired grant each look at O(1) grant records, however many the
# connection holds, and a reader that never sends LEASE.RELEASE
# (redis-cli, redis-benchmark, any Redis client reading replicas) costs no
# more per read than one that does. Before, a connection at the 4096-grant
# cap scanned all 4096 records on every new grant (92% of the server's CPU
# in a BATCH.GET.REPLICAS loop), and a release out of grant order scanned
# from the oldest.
#
# The same for the other lists that grow with use and that a client can
# make long: the removed versions waiting for their lease (found when a
# release ends one) and a connection's WATCHes (looked at by WATCH).

proc lc_visits {} { dict get [r debug visits] leases }
proc lc_lease {key} {
    set i [r object.info $key]
    if {$i eq ""} { return {} }
    dict get $i lease-ms
}
# n BATCH.GET.REPLICAS of keys on client c, pipelined.
proc lc_batches {c n keys} {
    for {set i 0} {$i < $n} {incr i} { $c batch.get.replicas {*}$keys }
    $c flush
    for {set i 0} {$i < $n} {incr i} { $c read }
}

start_server {tags {mooncake lease} overrides {segment-size 16mb lease-ttl 600000}} {
    set keys {}
    for {set i 0} {$i < 128} {incr i} {
        r set lc:$i x
        lappend keys lc:$i
    }

    test {DEBUG VISITS counts per structure and resets} {
        assert_equal OK [r debug visits reset]
        assert_equal 0 [lc_visits]
        r get.replicas lc:0
        assert_morethan [lc_visits] 0
        r lease.release lc:0
        assert_error {*unknown subcommand*} {r debug visits bogus}
    }

    test {10k grants never released, then more: each visits O(1) grant records} {
        set c [redis_deferring_client]
        # 80 x 128 = 10240 grants, none released: the connection is at its cap.
        lc_batches $c 80 $keys
        set v0 [lc_visits]
        lc_batches $c 8 $keys
        set per [expr {double([lc_visits] - $v0) / 1024}]
        assert_lessthan_equal $per 4
        # As before: past the cap a grant is not recorded but still granted,
        # and holds its period to the deadline; the first 4096 (32 per key)
        # are released one by one.
        set n 0
        for {set j 0} {$j < 33} {incr j} { incr n [r lease.release lc:5] }
        assert_equal 0 $n ;# r is another connection: it holds none of them
        for {set j 0} {$j < 33} {incr j} { $c lease.release lc:5 }
        $c flush
        for {set j 0} {$j < 33} {incr j} { incr n [$c read] }
        assert_equal 32 $n
        assert_range [lc_lease lc:5] 500000 600000
        $c close
    }

    test {Releases in any order find their grant in O(1)} {
        set c [redis_deferring_client]
        lc_batches $c 16 $keys ;# 2048 grants, 16 per key
        set v0 [lc_visits]
        # Newest key first: before, each release scanned from the oldest grant.
        for {set j 127} {$j >= 0} {incr j -1} {
            for {set k 0} {$k < 16} {incr k} { $c lease.release lc:$j }
        }
        $c flush
        set n 0
        for {set j 0} {$j < 2048} {incr j} { incr n [$c read] }
        assert_equal 2048 $n
        set per [expr {double([lc_visits] - $v0) / 2048}]
        assert_lessthan_equal $per 4
        $c close
    }

    test {Expired grants are pruned from the oldest, visiting only them plus O(1)} {
        set c [redis_deferring_client]
        r config set lease-ttl 50
        lc_batches $c 32 $keys ;# 4096 grants that run out in 50 ms: the cap
        r config set lease-ttl 600000
        # A grant of another key keeps the clock moving until the short ones ran out.
        r set lc:probe x
        r config set lease-ttl 50
        r get.replicas lc:probe
        r config set lease-ttl 600000
        wait_for_condition 200 10 {[lc_lease lc:probe] == 0} else { fail "lease did not run out" }
        set v0 [lc_visits]
        lc_batches $c 8 $keys
        # 4096 expired records leave once each; 1024 new grants, O(1) each.
        set visits [expr {[lc_visits] - $v0}]
        assert_lessthan_equal $visits [expr {4096 + 4 * 1024}]
        # They were recorded (the expired ones no longer fill the cap):
        # releasable one by one.
        $c lease.release lc:7
        $c flush
        assert_equal 1 [$c read]
        $c close
    }

    test {A grant whose deadline comes before an older one's is still O(1)} {
        # lease-ttl lowered: the newer grants run out before the older.
        set c [redis_deferring_client]
        lc_batches $c 8 $keys ;# long
        r config set lease-ttl 50
        lc_batches $c 8 $keys ;# short, behind the long ones
        r config set lease-ttl 600000
        set v0 [lc_visits]
        lc_batches $c 16 $keys
        assert_lessthan_equal [expr {double([lc_visits] - $v0) / 2048}] 4
        # Every recorded grant is released once, whatever its deadline.
        set n 0
        for {set j 0} {$j < 128} {incr j} {
            for {set k 0} {$k < 33} {incr k} { $c lease.release lc:$j }
        }
        $c flush
        for {set j 0} {$j < 128 * 33} {incr j} { incr n [$c read] }
        assert_range $n [expr {128 * 24}] [expr {128 * 32}]
        $c close
    }
}

# n keys prefix:0.. set to x, each read with GET.REPLICAS (pipelined) on a
# new deferring client, which is returned: every key's version is leased.
proc lc_leased_keys {prefix n} {
    for {set i 0} {$i < $n} {incr i} { r set $prefix:$i x }
    set c [redis_deferring_client]
    for {set i 0} {$i < $n} {incr i} { $c get.replicas $prefix:$i }
    $c flush
    for {set i 0} {$i < $n} {incr i} { $c read }
    return $c
}

start_server {tags {mooncake lease} overrides {segment-size 16mb lease-ttl 600000}} {
    test {A release that ends the lease of a removed version finds it in O(1) among the waiting ones} {
        set n 2000
        set c [lc_leased_keys dv $n]
        # Overwritten while leased: every old version waits for its lease.
        for {set i 0} {$i < $n} {incr i} { r set dv:$i y }
        assert_equal $n [get_info_field r store store_deferred_frees]
        set v0 [dict get [r debug visits] deferred]
        # The newest first: before, each release scanned the waiting list from its start.
        for {set i [expr {$n - 1}]} {$i >= 0} {incr i -1} { $c lease.release dv:$i }
        $c flush
        set released 0
        for {set i 0} {$i < $n} {incr i} { incr released [$c read] }
        assert_equal $n $released
        assert_equal 0 [get_info_field r store store_deferred_frees]
        set per [expr {double([dict get [r debug visits] deferred] - $v0) / $n}]
        assert_lessthan_equal $per 4
        $c close
    }
}

start_server {tags {mooncake multi}} {
    test {WATCH of many keys looks at O(1) of the connection's WATCHes per key} {
        set keys {}
        for {set i 0} {$i < 5000} {incr i} { lappend keys wk:$i }
        set v0 [dict get [r debug visits] watched-keys]
        r watch {*}$keys
        # Each key once more, and a key already watched: still one WATCH each.
        r watch {*}$keys wk:0
        set per [expr {double([dict get [r debug visits] watched-keys] - $v0) / 10001}]
        assert_lessthan_equal $per 4
        # They still work: a write to the last one fails the transaction.
        set c [redis_client]
        $c set wk:4999 changed
        $c close
        r multi
        r ping
        assert_equal {} [r exec]
        # The next transaction watches nothing.
        r multi
        r ping
        assert_equal PONG [r exec]
    }
}

start_server {tags {mooncake pubsub}} {
    test {Leaving a channel many subscribe to costs O(1) amortized, order and counts kept} {
        set n 256
        set subs {}
        for {set i 0} {$i < $n} {incr i} {
            set s [redis_deferring_client]
            $s subscribe many
            $s read
            lappend subs $s
        }
        assert_equal [list many $n] [r pubsub numsub many]
        set v0 [dict get [r debug visits] pubsub]
        set start $v0
        # Oldest first: the old array search found each at once but moved
        # every later subscriber down; newest first it searched them all.
        for {set i 0} {$i < $n} {incr i 2} {
            [lindex $subs $i] unsubscribe many
            [lindex $subs $i] read
        }
        set per [expr {double([dict get [r debug visits] pubsub] - $v0) / ($n / 2)}]
        assert_lessthan_equal $per 4
        # The half that stayed all get a message, and are counted once.
        assert_equal [list many [expr {$n / 2}]] [r pubsub numsub many]
        assert_equal [expr {$n / 2}] [r publish many hello]
        for {set i 1} {$i < $n} {incr i 2} {
            assert_equal {message many hello} [[lindex $subs $i] read]
        }
        set v0 [dict get [r debug visits] pubsub]
        for {set i [expr {$n - 1}]} {$i > 0} {incr i -2} {
            [lindex $subs $i] unsubscribe many
            [lindex $subs $i] read
        }
        # The compactions the holes of the first half paid for happen here:
        # counted over every departure, each cost O(1).
        set per [expr {double([dict get [r debug visits] pubsub] - $start) / $n}]
        assert_lessthan_equal $per 4
        assert_equal {many 0} [r pubsub numsub many]
        assert_equal 0 [r publish many hello]
        foreach s $subs { $s close }
    }

    test {Dropping one of many patterns costs O(1), and the others still match} {
        set s [redis_deferring_client]
        set n 2000
        for {set i 0} {$i < $n} {incr i} {
            $s psubscribe p$i:*
            $s read
        }
        assert_equal $n [r pubsub numpat]
        set v0 [dict get [r debug visits] pubsub]
        # The first ones: the old code searched and moved the array each time.
        for {set i 0} {$i < $n - 1} {incr i} {
            $s punsubscribe p$i:*
            $s read
        }
        set per [expr {double([dict get [r debug visits] pubsub] - $v0) / ($n - 1)}]
        assert_lessthan_equal $per 4
        assert_equal 1 [r pubsub numpat]
        assert_equal 1 [r publish p[expr {$n - 1}]:x hi]
        assert_equal [list pmessage p[expr {$n - 1}]:* p[expr {$n - 1}]:x hi] [$s read]
        assert_equal 0 [r publish p0:x hi]
        $s close
    }
}

start_server {tags {mooncake lease} overrides {segment-size 16mb lease-ttl 600000 hz 10}} {
    test {The cron does not look at every waiting version every tick, only those whose time has come} {
        set n 2000
        set c [lc_leased_keys sw $n]
        for {set i 0} {$i < $n} {incr i} { r set sw:$i y }
        assert_equal $n [get_info_field r store store_deferred_frees]
        set v0 [dict get [r debug visits] deferred-sweep]
        set t0 [clock milliseconds]
        # At least five cron ticks go by (hz 10); the old sweep looked at all
        # 2000 on each. Their leases run ten minutes: none is due.
        after 600
        set ticks [expr {([clock milliseconds] - $t0) / 100}]
        assert_morethan_equal $ticks 5
        set seen [expr {[dict get [r debug visits] deferred-sweep] - $v0}]
        assert_lessthan $seen $n
        assert_equal $n [get_info_field r store store_deferred_frees]
        $c close
    }
}

start_server {tags {mooncake lease} overrides {segment-size 16mb lease-ttl 300}} {
    test {Waiting versions leave when their lease runs out, each looked at about once} {
        set n 500
        set c [lc_leased_keys se $n]
        set v0 [dict get [r debug visits] deferred-sweep]
        for {set i 0} {$i < $n} {incr i} { r set se:$i y }
        wait_for_condition 100 20 {[get_info_field r store store_deferred_frees] == 0} else {
            fail "waiting versions not freed: [get_info_field r store store_deferred_frees]"
        }
        assert_lessthan_equal [expr {[dict get [r debug visits] deferred-sweep] - $v0}] [expr {2 * $n}]
        $c close
    }
}

start_server {tags {mooncake lease} overrides {segment-size 16mb}} {
    test {A version waiting for a lease of lease-ttl LLONG_MAX: no overflow, looked at once a revolution} {
        # Its deadline's tick was computed as (until + 63) / 64: past
        # LLONG_MAX - 63 that overflowed (undefined behaviour: the
        # sanitizer build's server dies; a plain build got a negative
        # bucket number that only deferAdd's clamp kept in the wheel).
        r config set lease-ttl 9223372036854775807
        r set huge:1 v
        r get.replicas huge:1
        r del huge:1
        assert_equal 1 [get_info_field r store store_deferred_frees]
        wait_cron_ticks 1
        assert_equal OK [r debug visits reset]
        wait_cron_ticks 5
        assert_lessthan_equal [dict get [r debug visits] deferred-sweep] 1
        assert_equal 1 [get_info_field r store store_deferred_frees]
        r config set lease-ttl 10000
    }
}
