# A refused write changes nothing, fragmentation included (issue 25): a
# write evicts only if a contiguous run of the pool, once everything
# evictable were gone, would hold it. The pool is laid out as evictable
# values of 60 KiB, each followed by a 4 KiB *wall* that eviction cannot
# free now (hard-pinned, leased, a pending put): the bytes eviction could
# free are far more than 100 KiB, but no run is longer than 60 KiB, so a
# 100 KiB SET or PUT.START must be refused with every key in place and
# nothing evicted. When a wall goes, the write evicts and succeeds. And
# the check does not walk the pool per write: INFO store_evict_fit_scans
# stays put over repeated evicting writes while no wall changes.

set KiB 1024

proc frag_istore {field} { get_info_field r store $field }

proc frag_assert_accounted {} {
    set f {}
    foreach line [split [r info store] "\r\n"] {
        if {[regexp {^([a-z_]+):(.*)$} $line -> k v]} { dict set f $k $v }
    }
    set parts 0
    foreach k {store_pool_values store_pool_pending store_pool_deferred store_pool_zeroing store_pool_free} {
        incr parts [dict get $f $k]
    }
    assert_equal [dict get $f store_pool_size] $parts
}

# Fills the pool with e:<i> (60 KiB, evictable) and a wall after each,
# made by the script `wall` with $k the wall's key. Returns the pair count.
proc frag_fill {wall} {
    set pairs [expr {[frag_istore store_pool_size] / (64 * 1024)}]
    for {set i 0} {$i < $pairs} {incr i} {
        r set e:$i [string repeat e [expr {60 * 1024}]]
        set k w:$i
        eval $wall
    }
    assert_equal [frag_istore store_pool_size] [frag_istore store_pool_used]
    return $pairs
}

# A 100 KiB SET and PUT.START are refused; every key keeps its bytes and
# nothing was evicted. `walls_in_keyspace`: whether the walls are keys.
proc frag_assert_refused {pairs walls_in_keyspace} {
    set n [r dbsize]
    set ev [frag_istore store_evictions]
    set used [frag_istore store_pool_used]
    assert_error {OOM*} {r set big [string repeat b [expr {100 * 1024}]]}
    assert_error {NOSPACE*} {r put.start bigput [expr {100 * 1024}]}
    assert_equal $ev [frag_istore store_evictions]
    assert_equal $n [r dbsize]
    assert_equal $used [frag_istore store_pool_used]
    for {set i 0} {$i < $pairs} {incr i} {
        assert_equal [expr {60 * 1024}] [r strlen e:$i]
        if {$walls_in_keyspace} { assert_equal 4096 [r strlen w:$i] }
    }
    assert_equal 0 [r exists big]
    frag_assert_accounted
}

start_server {tags {mooncake store hostile} overrides {segment-size 1mb evict-policy lru evict-high-watermark 1}} {
    test {Hard-pinned values between evictable ones: a write no run can hold evicts nothing} {
        set pairs [frag_fill {r set $k [string repeat w 4096]; r pin $k hard}]
        assert_morethan $pairs 8
        frag_assert_refused $pairs 1
    }

    test {When a wall goes, the write evicts and succeeds; repeated evicting writes do not rescan} {
        r unpin w:3
        set ev [frag_istore store_evictions]
        assert_equal OK [r set big [string repeat b [expr {100 * 1024}]]]
        assert_morethan [frag_istore store_evictions] $ev
        frag_assert_accounted
        # Between wall changes, every evicting write is answered from the
        # runs already found: no walk over the pool's extents.
        set scans [frag_istore store_evict_fit_scans]
        set extents [frag_istore store_evict_fit_extents]
        assert_morethan $scans 0
        for {set j 0} {$j < 20} {incr j} {
            set ev [frag_istore store_evictions]
            assert_equal OK [r set big:$j [string repeat b [expr {100 * 1024}]]]
            assert_morethan [frag_istore store_evictions] $ev
        }
        assert_equal $scans [frag_istore store_evict_fit_scans]
        assert_equal $extents [frag_istore store_evict_fit_extents]
        # The pinned walls were never taken.
        for {set i 0} {$i < 16} {incr i} { if {$i != 3} { assert_equal 4096 [r strlen w:$i] } }
        frag_assert_accounted
    }

    test {A new wall inside the only fitting run is seen without a rescan} {
        # big:19 holds the only 124 KiB run; pinning it leaves none.
        r pin big:19 hard
        set scans [frag_istore store_evict_fit_scans]
        set n [r dbsize]
        set ev [frag_istore store_evictions]
        assert_error {OOM*} {r set other [string repeat o [expr {100 * 1024}]]}
        assert_equal $ev [frag_istore store_evictions]
        assert_equal $n [r dbsize]
        assert_equal $scans [frag_istore store_evict_fit_scans]
        frag_assert_accounted
    }
}

start_server {tags {mooncake store hostile} overrides {segment-size 1mb evict-policy lru evict-high-watermark 1
                                                       lease-ttl 600000}} {
    test {Leased values between evictable ones: a write no run can hold evicts nothing} {
        set pairs [frag_fill {r set $k [string repeat w 4096]; r get.replicas $k}]
        frag_assert_refused $pairs 1
        # The lease released, the run is there and the write succeeds.
        assert_equal 1 [r lease.release w:3]
        set ev [frag_istore store_evictions]
        assert_equal OK [r set big [string repeat b [expr {100 * 1024}]]]
        assert_morethan [frag_istore store_evictions] $ev
        frag_assert_accounted
    }
}

start_server {tags {mooncake store hostile} overrides {segment-size 1mb evict-policy lru evict-high-watermark 1
                                                       put-timeout 600000 put-release-timeout 600000}} {
    test {Pending puts between evictable values: a write no run can hold evicts nothing} {
        set pairs [frag_fill {r put.start $k 4096}]
        frag_assert_refused $pairs 0
        assert_equal $pairs [frag_istore store_pending_puts]
        # One put ended: its value is evictable, the run is there.
        assert_equal OK [r put.end w:3]
        set ev [frag_istore store_evictions]
        assert_equal OK [r set big [string repeat b [expr {100 * 1024}]]]
        assert_morethan [frag_istore store_evictions] $ev
        frag_assert_accounted
    }
}

# Placement: a PUT.START that no run of the pool can hold skips the pool
# without evicting there, and makes room in a mounted segment that can.
start_server {tags {mooncake store hostile} overrides {segment-size 1mb evict-policy lru evict-high-watermark 1}} {
    test {PUT.START evicts in the segment whose run can hold it, nothing in a fragmented pool} {
        set owner [redis_client]
        set m [$owner mount fragm 256kb OWNER w1 HOST h1]
        set pairs [frag_fill {r set $k [string repeat w 4096]; r pin $k hard}]
        for {set i 0} {$i < 4} {incr i} {
            set reps [r put.start m:$i [expr {64 * 1024}] PREFER fragm]
            assert_equal $m [lindex $reps 0 0]
            r put.end m:$i
        }
        assert_equal [expr {256 * 1024}] [dict get [r segment.info $m] used]
        set ev [frag_istore store_evictions]
        set reps [r put.start bigput [expr {100 * 1024}]]
        assert_equal $m [lindex $reps 0 0]
        assert_equal OK [r put.end bigput]
        assert_morethan [frag_istore store_evictions] $ev
        # Only the mount's objects were evicted: the pool's are all there.
        for {set i 0} {$i < $pairs} {incr i} {
            assert_equal [expr {60 * 1024}] [r strlen e:$i]
            assert_equal 4096 [r strlen w:$i]
        }
        frag_assert_accounted
        $owner close
    }
}

# Under maxmemory (the pool's cap), leased values are not bytes eviction
# can free: a write that only evicting them would let under the cap is
# refused with nothing evicted; one the other values make room for passes.
start_server {tags {mooncake store hostile} overrides {segment-size 4mb maxmemory 1mb evict-policy lru
                                                       evict-high-watermark 1 lease-ttl 600000}} {
    test {maxmemory: leased values are walls to the cap too} {
        for {set i 0} {$i < 16} {incr i} { r set v:$i [string repeat v [expr {60 * 1024}]] }
        for {set i 0} {$i < 12} {incr i} { r get.replicas v:$i }
        set n [r dbsize]
        set ev [frag_istore store_evictions]
        assert_error {OOM*} {r set big [string repeat b [expr {400 * 1024}]]}
        assert_equal $ev [frag_istore store_evictions]
        assert_equal $n [r dbsize]
        for {set i 0} {$i < 16} {incr i} { assert_equal [expr {60 * 1024}] [r strlen v:$i] }
        frag_assert_accounted
        assert_equal OK [r set big [string repeat b [expr {200 * 1024}]]]
        assert_morethan [frag_istore store_evictions] $ev
        for {set i 0} {$i < 12} {incr i} { assert_equal 1 [r exists v:$i] }
        frag_assert_accounted
    }
}
