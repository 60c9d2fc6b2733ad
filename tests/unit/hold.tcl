# Holds (HOLD.REPLICAS / HOLD.RELEASE): grants without a deadline, for a
# reader that reads an object's bytes in place for as long as it keeps them
# (libmooncake's views, under the Python binding's get_buffer handles)
# instead of copying them within a lease. While a hold stands the version's
# space is not reused (removed or overwritten) and it is not evicted, however
# short lease-ttl is; the hold ends by HOLD.RELEASE on its connection, or
# when the connection closes (then lease-ttl more).

set MiB 1048576

proc hd_info {key field} {
    set i [r object.info $key]
    if {$i eq ""} { return {} }
    dict get $i $field
}
proc hd_store {field {client r}} { get_info_field $client store $field }
proc hd_deferred {} { get_info_field r store store_deferred_frees }

start_server {tags {mooncake lease hold} overrides {segment-size 16mb lease-ttl 10000}} {
    set v [pattern_bytes $MiB 7]

    test {HOLD.REPLICAS answers as BATCH.GET.REPLICAS, one element per key} {
        r set hd:a $v
        r set hd:b xy
        set held [r hold.replicas hd:a hd:missing hd:b]
        set got [r batch.get.replicas hd:a hd:missing hd:b]
        r lease.release hd:a hd:b
        assert_equal 3 [llength $held]
        assert_equal {} [lindex $held 1]
        # Same size, checksum and replicas; its lease element is lease-ttl.
        assert_equal [lrange [lindex $got 0] 1 end] [lrange [lindex $held 0] 1 end]
        assert_equal [lrange [lindex $got 2] 1 end] [lrange [lindex $held 2] 1 end]
        assert_equal 10000 [lindex [lindex $held 0] 0]
        assert_equal 1 [hd_info hd:a holds]
        assert_equal 2 [hd_store store_holds]
        assert_equal 2 [r hold.release hd:a hd:b]
        assert_equal 0 [hd_info hd:a holds]
        assert_equal 0 [hd_store store_holds]
        assert_equal 0 [r hold.release hd:a nokey]
        assert_error {*wrong number*} {r hold.release}
        assert_error {*wrong number*} {r hold.replicas}
    }

    test {COMMAND: HOLD.REPLICAS names its keys (routing, ACL); HOLD.RELEASE names none, and ACL key patterns allow it only its own holds} {
        assert_equal {hd:a hd:b} [r command getkeys hold.replicas hd:a hd:b]
        assert_error {*no key arguments*} {r command getkeys hold.release hd:a}
        assert_match {*Ends this connection's holds*} [r command docs hold.release]
        r acl setuser hdt on >hdpw ~hdt:* +@all
        r set hdt:1 x
        set c [redis_client]
        $c auth hdt hdpw
        # a key outside the user's patterns is refused, and nothing is held
        assert_error {NOPERM*} {$c hold.replicas hd:a hdt:1}
        assert_equal 0 [hd_store store_holds]
        assert_equal 1 [llength [$c hold.replicas hdt:1]]
        # a release names no key the user reads: it can end only its own holds
        assert_equal 0 [$c hold.release hd:a]
        assert_equal 1 [$c hold.release hdt:1]
        $c close
        r acl deluser hdt
    }

    test {A pending key is NOTREADY and nothing is held} {
        r put.start hd:pending 10
        set e [lindex [r hold.replicas hd:pending] 0]
        assert_match {NOTREADY*} $e
        assert_equal 0 [hd_store store_holds]
        r put.revoke hd:pending
    }

    test {A held version's space outlives lease-ttl after it is removed, and comes back at its release} {
        r config set lease-ttl 100
        r set hd:r $v
        set d0 [hd_deferred]
        r hold.replicas hd:r
        r del hd:r
        assert_equal [expr {$d0 + 1}] [hd_deferred]
        after 400
        # Past lease-ttl, still waiting: the hold has no deadline.
        assert_equal [expr {$d0 + 1}] [hd_deferred]
        assert_equal 1 [r hold.release hd:r]
        assert_equal $d0 [hd_deferred]
        r config set lease-ttl 10000
    }

    test {A held object is not evicted when the pool fills} {
        r config set lease-ttl 100
        r flushall
        r set hd:keep $v
        r hold.replicas hd:keep
        after 200
        # hd:keep is the oldest object: the first eviction would take it.
        for {set i 0} {$i < 40} {incr i} { r set hd:fill:$i $v }
        assert_morethan [get_info_field r stats evicted_keys] 0
        assert_equal 1 [r exists hd:keep]
        assert_equal $v [r get hd:keep]
        assert_equal 1 [r hold.release hd:keep]
        r config set lease-ttl 10000
    }

    test {Holds belong to their connection; closing it leaves lease-ttl} {
        r set hd:c $v
        set c [redis_client]
        $c hold.replicas hd:c
        # Another connection cannot end it.
        assert_equal 0 [r hold.release hd:c]
        assert_equal 1 [hd_info hd:c holds]
        $c close
        wait_for_condition 50 20 {[hd_info hd:c holds] == 0} else { fail "the hold outlived its connection" }
        assert_range [hd_info hd:c lease-ms] 8000 10000
    }

    test {A connection holds at most 4096 grants; past that a key is refused with LIMIT} {
        r set hd:a $v
        set c [redis_client]
        set args {}
        for {set i 0} {$i < 4097} {incr i} { lappend args hd:a }
        assert_equal OK [r debug visits reset]
        set reply [$c hold.replicas {*}$args]
        set visits [dict get [r debug visits] leases]
        assert_equal 4097 [llength $reply]
        assert_match {LIMIT*} [lindex $reply 4096]
        assert_equal 4096 [hd_info hd:a holds]
        assert_equal 1 [hd_store store_holds_limited]
        # One record looked at per grant, however many the key already has.
        assert_lessthan_equal $visits 4097
        assert_equal OK [r debug visits reset]
        assert_equal 4096 [$c hold.release {*}[lrange $args 0 4095]]
        assert_lessthan_equal [dict get [r debug visits] leases] 4096
        assert_equal 0 [hd_info hd:a holds]
        $c close
    }
}
