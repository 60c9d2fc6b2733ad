# Read leases that end when the reader is done (LEASE.RELEASE), and a full
# store that behaves predictably: a store whose every object was just read
# refuses puts only while readers are still reading, and says why in the log.
#
# A lease protects a reader mid-copy from having its bytes reused. Held to
# lease-ttl after every read, it also kept a store full of recently read
# objects from evicting any of them, and kept the space of overwritten
# versions held long after their readers finished.

set MiB 1048576

proc lr_store {field {client r}} { get_info_field $client store $field }
proc lr_lease {key {client r}} {
    set i [$client object.info $key]
    if {$i eq ""} { return {} }
    dict get $i lease-ms
}

start_server {tags {mooncake lease} overrides {segment-size 16mb lease-ttl 10000}} {
    set v [pattern_bytes $MiB 5]

    test {LEASE.RELEASE ends this connection's lease on a key at once} {
        r set lr:1 $v
        r get.replicas lr:1
        assert_range [lr_lease lr:1] 9000 10000
        set early0 [lr_store store_leases_released_early]
        assert_equal 1 [r lease.release lr:1]
        assert_equal 0 [lr_lease lr:1]
        assert_equal [expr {$early0 + 1}] [lr_store store_leases_released_early]
        # Nothing left to release.
        assert_equal 0 [r lease.release lr:1]
        assert_equal 0 [r lease.release never-leased]
        assert_error {*wrong number*} {r lease.release}
    }

    test {A lease two readers hold ends only when both released it} {
        set c [redis_client]
        r get.replicas lr:1
        $c get.replicas lr:1
        assert_equal 1 [r lease.release lr:1]
        assert_range [lr_lease lr:1] 9000 10000
        # Another connection cannot release a grant it was not given.
        assert_equal 0 [r lease.release lr:1]
        assert_range [lr_lease lr:1] 9000 10000
        assert_equal 1 [$c lease.release lr:1]
        assert_equal 0 [lr_lease lr:1]
        $c close
    }

    test {LEASE key ms holds the lease to its end whatever readers release} {
        r get.replicas lr:1
        assert_range [r lease lr:1 5000] 9000 10000
        assert_equal 1 [r lease.release lr:1]
        assert_range [lr_lease lr:1] 9000 10000
        r config set lease-ttl 10000
    }

    test {A reader that disconnects keeps its lease to the deadline (it may still be copying)} {
        r set lr:2 $v
        set c [redis_client]
        $c get.replicas lr:2
        $c close
        after 100
        assert_range [lr_lease lr:2] 9000 10000
    }

    test {A release that comes after its lease ran out cannot end a later reader's lease} {
        r set lr:3 $v
        r config set lease-ttl 200
        set c [redis_client]
        $c get.replicas lr:3
        after 300
        r config set lease-ttl 10000
        r get.replicas lr:3
        # $c's grant belongs to the period that ended; r's is a new one.
        $c lease.release lr:3
        assert_range [lr_lease lr:3] 9000 10000
        assert_equal 1 [r lease.release lr:3]
        assert_equal 0 [lr_lease lr:3]
        $c close
    }

    test {Releases in any order find their grants; a connection's grants are bounded} {
        r flushall
        for {set i 0} {$i < 100} {incr i} { r set ord:$i x }
        for {set i 0} {$i < 100} {incr i} { r get.replicas ord:$i }
        # Reverse order, then every other one twice: 100 released, no more.
        set n 0
        for {set i 99} {$i >= 0} {incr i -2} { incr n [r lease.release ord:$i] }
        for {set i 98} {$i >= 0} {incr i -2} { incr n [r lease.release ord:$i ord:$i] }
        assert_equal 100 $n
        for {set i 0} {$i < 100} {incr i} { assert_equal 0 [lr_lease ord:$i] }
        # Past 4096 live grants a grant is not recorded: it holds its period.
        set c [redis_deferring_client]
        for {set i 0} {$i < 4100} {incr i} { $c get.replicas ord:0 }
        $c flush
        for {set i 0} {$i < 4100} {incr i} { $c read }
        for {set i 0} {$i < 4100} {incr i} { $c lease.release ord:0 }
        $c flush
        set n 0
        for {set i 0} {$i < 4100} {incr i} { incr n [$c read] }
        assert_equal 4096 $n
        assert_range [lr_lease ord:0] 9000 10000
        $c close
    }

    test {Store full of just-read objects: puts fail (NOSPACE, logged) while leased, succeed once released} {
        r flushall
        r config set evict-policy lru
        set n 0
        while {$n < 32} {
            if {[catch {r set full:$n $v}]} break
            incr n
        }
        # Every object read, none released: nothing may be evicted.
        for {set i 0} {$i < $n} {incr i} { r get.replicas full:$i }
        set c [redis_client]
        # Fill whatever room eviction left until a put fails.
        set failed 0
        for {set i 0} {$i < 32} {incr i} {
            if {[catch {$c put.start new:$i $MiB} err]} { set failed 1; break }
            $c put.end new:$i
            $c get.replicas new:$i
        }
        assert_equal 1 $failed
        assert_match {NOSPACE*} $err
        wait_for_log_messages 0 {*No space for a put of 1.00M*lease*} 50 20
        # The readers are done: the same put now evicts and succeeds.
        for {set i 0} {$i < $n} {incr i} { r lease.release full:$i }
        assert_equal 1 [llength [$c put.start new:after $MiB]]
        assert_equal OK [$c put.end new:after]
        $c close
    }
}

start_server {tags {mooncake lease} overrides {segment-size 16mb lease-ttl 10000}} {
    set v [pattern_bytes $MiB 5]

    test {Releasing the lease of an overwritten version gives its space back at once} {
        r set ow:1 $v
        set used0 [lr_store store_pool_used]
        r get.replicas ow:1
        r set ow:1 [pattern_bytes $MiB 6]
        # The old version waits for the lease: both are allocated.
        assert_morethan_equal [lr_store store_pool_used] [expr {$used0 + $MiB}]
        assert_equal 1 [r lease.release ow:1]
        assert_equal $used0 [lr_store store_pool_used]
        assert_equal [pattern_bytes $MiB 6] [r get ow:1]
    }
}
