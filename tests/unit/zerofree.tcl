# Freed pool space is zeroed off the put's path (issue 14, src/zerofree.c).
# Free space in the pool is always zero: an extent is zeroed when it is
# freed (small ones at once, large ones by a background thread), so a put
# ended without writing reads zeros even where other values were, while
# PUT.START itself zeroes nothing. Space still being zeroed must come back
# before a put fails or anything is evicted.
#
# DEBUG ZEROFREE PAUSE holds the thread, so queued extents stay queued and
# the main thread has to finish them itself; INFO settles the queue (it
# reports exact pool figures), so no test looks at INFO between a free and
# the put that needs the space.

set KiB 1024
set MiB 1048576

proc zeros {n} { string repeat "\x00" $n }

proc zf_field {field} { get_info_field r store $field }

# Fills the pool with values of a non-zero pattern and odd lengths (so the
# aligned tails of their extents are exercised too), until OOM.
proc zf_fill_pattern {prefix sizes} {
    set keys {}
    set i 0
    while 1 {
        set size [lindex $sizes [expr {$i % [llength $sizes]}]]
        if {[catch {r set $prefix:$i [pattern_bytes $size [expr {$i + 1}]]}]} break
        lappend keys $prefix:$i
        incr i
    }
    return $keys
}

# Covers the whole (empty) pool with puts ended unwritten -- `size` bytes
# each while they fit, then one per free range left (extents freed out of
# order can leave the space in a few ranges) -- and checks that every one
# reads zeros. Returns the keys.
proc zf_cover_unwritten {prefix size} {
    set keys {}
    set n 0
    while 1 {
        if {[catch {r put.start $prefix:$n $size} err]} {
            assert_match {*NOSPACE*} $err
            break
        }
        assert_equal OK [r put.end $prefix:$n]
        lappend keys $prefix:$n
        incr n
    }
    # NOSPACE came after every queued extent was taken back.
    assert_equal 0 [zf_field store_pool_zeroing_extents]
    assert_morethan_equal $n [expr {[zf_field store_pool_size] / $size - 2}]
    while {[set free [zf_field store_pool_largest_free]] > 0} {
        r put.start $prefix:$n $free
        assert_equal OK [r put.end $prefix:$n]
        lappend keys $prefix:$n
        incr n
    }
    assert_equal [zf_field store_pool_size] [zf_field store_pool_used]
    foreach k $keys {
        set v [r get $k]
        if {$v ne [zeros [string length $v]]} {
            fail "$k ([string length $v] bytes): a put ended unwritten shows an earlier value's bytes"
        }
    }
    return $keys
}

start_server {tags {mooncake zerofree} overrides {segment-size 16mb evict-policy noeviction}} {

    test {The threshold is a config directive} {
        assert_equal {zero-free-async-threshold 262144} [r config get zero-free-async-threshold]
        assert_equal OK [r config set zero-free-async-threshold 1mb]
        assert_equal {zero-free-async-threshold 1048576} [r config get zero-free-async-threshold]
        r config set zero-free-async-threshold 256kb
    } {OK}

    foreach paused {0 1} {
        test "Unwritten puts read zeros over the whole pool after large and small values (thread paused: $paused)" {
            if {$paused} { r debug zerofree pause }
            for {set round 0} {$round < 3} {incr round} {
                # Large (queued) and small (zeroed at once) extents.
                set keys [zf_fill_pattern fill$round {3000001 100 300007 4099 1048573}]
                assert_morethan [llength $keys] 5
                r del {*}$keys
                # Every byte of the pool held a pattern; now 16 puts of 1 MiB
                # (then smaller ones) cover all of it. No INFO in between.
                set size [expr {$round == 1 ? 262144 : 1048576}]
                r del {*}[zf_cover_unwritten put$round $size]
            }
            if {$paused} { r debug zerofree resume }
            assert_equal 0 [r dbsize]
            assert_equal 0 [zf_field store_pool_used]
        }
    }

    test {A put ended half written: the rest is zeros, over a freed large value} {
        set big [pattern_bytes [expr {8 * $MiB}] 7]
        r set big $big
        r del big
        set rep [lindex [r put.start half [expr {8 * $MiB}]] 0]
        lassign $rep seg off len
        r seg.write $seg $off [string repeat A 1000]
        r put.end half
        set v [r get half]
        assert_equal [string repeat A 1000] [string range $v 0 999]
        if {[string range $v 1000 end] ne [zeros [expr {8 * $MiB - 1000}]]} {
            fail "the unwritten part shows the freed value's bytes"
        }
        r del half
    } {1}

    test {An extent being zeroed is refused by the data plane} {
        r debug zerofree pause
        set rep [lindex [r put.start dp [expr {2 * $MiB}]] 0]
        lassign $rep seg off len
        r put.end dp
        r del dp
        # Queued for the (paused) thread: allocated, but no object's.
        assert_error {*not inside the extent of a pending object*} {r seg.write $seg $off hello}
        assert_error {*not inside the extent of a complete object*} {r seg.read $seg $off 5}
        r debug zerofree resume
    } {OK}

    test {INFO reports what was queued and settles it: used is back after DEL} {
        set used0 [zf_field store_pool_used]
        set async0 [zf_field store_pool_zeroed_async_bytes]
        set inline0 [zf_field store_pool_zeroed_inline_bytes]
        r debug zerofree pause
        r set large [pattern_bytes $MiB 3]
        r set small [pattern_bytes 1000 4]
        r del large small
        set info [r info store]
        regexp {store_pool_zeroing_bytes:(\d+)} $info -> qbytes
        regexp {store_pool_zeroing_extents:(\d+)} $info -> qext
        regexp {store_pool_used:(\d+)} $info -> used
        assert_equal $MiB $qbytes
        assert_equal 1 $qext
        assert_equal $used0 $used
        assert_equal [expr {$async0 + $MiB}] [zf_field store_pool_zeroed_async_bytes]
        assert_equal [expr {$inline0 + 1008}] [zf_field store_pool_zeroed_inline_bytes]
        assert_equal 0 [zf_field store_pool_zeroing_bytes]
        r debug zerofree resume
    } {OK}

    test {zero-free-async-threshold decides what is queued} {
        r debug zerofree pause
        r config set zero-free-async-threshold 0
        r set tiny abc
        r del tiny
        assert_equal 1 [zf_field store_pool_zeroing_extents]
        r config set zero-free-async-threshold 16mb
        # A store object's extent: a SET value's may be kept for the next SET
        # (Reuse), which INFO counts as zeroing too.
        r put.start notqueued $MiB
        r put.end notqueued
        r del notqueued
        assert_equal 0 [zf_field store_pool_zeroing_extents]
        r config set zero-free-async-threshold 256kb
        r debug zerofree resume
    } {OK}

    test {A version freed when its reader's lease ends goes back zeroed} {
        set rep [lindex [r put.start leased [expr {4 * $MiB}]] 0]
        lassign $rep seg off len
        r seg.write $seg $off [pattern_bytes $MiB 9]
        r put.end leased
        r get.replicas leased
        r remove leased
        assert_equal 1 [zf_field store_deferred_frees]
        assert_equal 1 [r lease.release leased]
        assert_equal 0 [zf_field store_deferred_frees]
        zf_cover_unwritten lz $MiB
        r flushall
    } {OK}

    test {FLUSHALL, then a put of the whole pool: no NOSPACE (thread paused)} {
        set nospace0 [zf_field store_puts_nospace]
        set waits0 [zf_field store_pool_zero_waits]
        for {set i 0} {$i < 4} {incr i} { r set fl:$i [pattern_bytes [expr {4 * $MiB}] $i] }
        r debug zerofree pause
        r flushall
        r put.start whole [expr {16 * $MiB}]
        r put.end whole
        r debug zerofree resume
        if {[r get whole] ne [zeros [expr {16 * $MiB}]]} { fail "stale bytes in the whole-pool put" }
        assert_equal $nospace0 [zf_field store_puts_nospace]
        # The put itself finished the queued zeroing.
        assert_equal [expr {$waits0 + 1}] [zf_field store_pool_zero_waits]
        r flushall
    } {OK}
}

start_server {tags {mooncake zerofree} overrides {segment-size 16mb evict-policy lru}} {

    test {REMOVE of large objects, then a put that needs their space: no eviction, no NOSPACE} {
        for {set round 0} {$round < 2} {incr round} {
            set paused [expr {$round == 0}]
            # Small live objects that eviction would take first.
            for {set i 0} {$i < 20} {incr i} { r set live:$i [pattern_bytes 1000 $i] }
            for {set i 0} {$i < 3} {incr i} {
                set rep [lindex [r put.start big:$i [expr {4 * $MiB}]] 0]
                lassign $rep seg off len
                r seg.write $seg $off [pattern_bytes 4096 $i]
                r put.end big:$i
            }
            set ev0 [get_info_field r stats evicted_keys]
            set nospace0 [zf_field store_puts_nospace]
            if {$paused} { r debug zerofree pause }
            r remove big:0 big:1 big:2
            # 12 MiB of the 16 MiB pool, with the small ones still there.
            r put.start again [expr {12 * $MiB}]
            r put.end again
            if {$paused} { r debug zerofree resume }
            assert_equal 20 [llength [r keys live:*]]
            assert_equal $ev0 [get_info_field r stats evicted_keys]
            assert_equal $nospace0 [zf_field store_puts_nospace]
            if {[r get again] ne [zeros [expr {12 * $MiB}]]} { fail "stale bytes in the new put" }
            r flushall
        }
    }

    test {Space being zeroed does not trigger watermark evictions (maxmemory)} {
        r config set maxmemory 8mb
        for {set i 0} {$i < 20} {incr i} { r set live:$i [pattern_bytes 1000 $i] }
        set ev0 [get_info_field r stats evicted_keys]
        r debug zerofree pause
        # 3.8 MiB freed and queued, 3.8 MiB live: the allocator's used is
        # above evict-high-watermark (0.9) of 8 MiB, the live bytes are not.
        r set b1 [pattern_bytes 3984588 1]
        r del b1
        r set b2 [pattern_bytes 3984588 2]
        after 400 ;# a few cron ticks (hz 10)
        r debug zerofree resume
        assert_equal $ev0 [get_info_field r stats evicted_keys]
        assert_equal 21 [r dbsize]
        r flushall
        r config set maxmemory 0
    } {OK}

    test {Lowering maxmemory counts only live objects, then evicts down to it} {
        for {set i 0} {$i < 20} {incr i} { r set live:$i [pattern_bytes 1000 $i] }
        for {set i 0} {$i < 3} {incr i} { r set big:$i [pattern_bytes [expr {4 * $MiB}] $i] }
        set ev0 [get_info_field r stats evicted_keys]
        r debug zerofree pause
        r del big:0 big:1
        r config set maxmemory 8mb
        after 400
        assert_equal $ev0 [get_info_field r stats evicted_keys]
        assert_equal 21 [r dbsize]
        # Below the live bytes: the watermark evicts.
        r config set maxmemory 2mb
        wait_for_condition 50 100 {[get_info_field r stats evicted_keys] > $ev0} else {
            fail "lowering maxmemory below the live bytes evicted nothing"
        }
        r debug zerofree resume
        r flushall
        r config set maxmemory 0
    } {OK}
}

# Reuse (issue 27): a SET's value is written whole from the socket, so a
# freed large extent of its size goes to it unzeroed; nothing else gets one.
start_server {tags {mooncake zerofree} overrides {segment-size 16mb evict-policy noeviction}} {
    test {A SET replacing a large value takes the freed extent without zeroing it} {
        set r0 [zf_field store_pool_reused_unzeroed_bytes]
        set a0 [zf_field store_pool_zeroed_async_bytes]
        # A new version is placed before the old one goes: the second SET
        # gets fresh space, the third the first's extent, and k2 the second's.
        r set k [pattern_bytes $MiB 3]
        r set k [pattern_bytes $MiB 4]
        # A shorter value of the same aligned size: its tail is zeroed, the
        # rest written by the SET.
        set v [pattern_bytes [expr {$MiB - 5}] 5]
        r set k $v
        r set k2 [pattern_bytes $MiB 6]
        assert_equal $v [r get k]
        assert_equal [pattern_bytes $MiB 6] [r get k2]
        assert_equal [expr {$r0 + 2 * $MiB}] [zf_field store_pool_reused_unzeroed_bytes]
        # Nothing was zeroed for them (what INFO settles is the last versions').
        r del k k2
        set a1 [zf_field store_pool_zeroed_async_bytes]
        assert_equal [expr {$a0 + 2 * $MiB}] $a1
        r debug alloc-check
    } {OK}

    test {A SET replacing a 64 KiB value takes the freed extent too (read in place, below the async threshold)} {
        # From PROTO_BIG_ARG (32 KiB) on a SET's value is read from the
        # socket into its extent: such an extent is kept, not memset inline.
        set r0 [zf_field store_pool_reused_unzeroed_bytes]
        r set k64 [pattern_bytes [expr {64 * $KiB}] 3]
        r set k64 [pattern_bytes [expr {64 * $KiB}] 4]
        set v [pattern_bytes [expr {64 * $KiB - 3}] 5]
        r set k64 $v
        assert_equal $v [r get k64]
        assert_equal [expr {$r0 + 64 * $KiB}] [zf_field store_pool_reused_unzeroed_bytes]
        # Below the bound nothing is kept: no SET that short reads in place.
        r set k16 [pattern_bytes [expr {16 * $KiB}] 3]
        r set k16 [pattern_bytes [expr {16 * $KiB}] 4]
        r set k16 [pattern_bytes [expr {16 * $KiB}] 5]
        assert_equal [expr {$r0 + 64 * $KiB}] [zf_field store_pool_reused_unzeroed_bytes]
        r del k64 k16
        r debug alloc-check
    } {OK}

    test {An MSET of ten 64 KiB values replacing ten takes all ten extents} {
        set keys {}
        for {set i 0} {$i < 10} {incr i} { lappend keys m:$i }
        # No INFO in between: it zeroes what is kept (settling the figures).
        set r0 [zf_field store_pool_reused_unzeroed_bytes]
        foreach seed {1 2 3} {
            set args {}
            foreach k $keys { lappend args $k [pattern_bytes [expr {64 * $KiB}] $seed] }
            r mset {*}$args
        }
        # Each MSET's values are placed before the previous ones go: the
        # second's in fresh space, the third's in the ten the first freed.
        assert_equal [expr {$r0 + 10 * 64 * $KiB}] [zf_field store_pool_reused_unzeroed_bytes]
        assert_equal [pattern_bytes [expr {64 * $KiB}] 3] [r get m:9]
        r del {*}$keys
        r debug alloc-check
    } {OK}

    test {A store object's extent is queued, not kept: a put loop stays on its pages} {
        set r0 [zf_field store_pool_reused_unzeroed_bytes]
        r put.start p $MiB
        r put.end p
        r del p
        r set after [pattern_bytes $MiB 8]
        r del after
        expr {[zf_field store_pool_reused_unzeroed_bytes] - $r0}
    } {0}

    test {Only a writer of every byte reuses: SETRANGE's grown version reads zeros} {
        r set big [pattern_bytes $MiB 7]
        r del big
        r set s abc
        r setrange s [expr {$MiB - 10}] x
        set v [r get s]
        assert_equal abc [string range $v 0 2]
        if {[string range $v 3 end-1] ne [zeros [expr {$MiB - 13}]]} {
            fail "SETRANGE's new version shows a freed value's bytes"
        }
        r del s
    } {1}

    foreach {sizes putsize} {{1048576 2097152 524288} 1048576 {65536 131072 196608} 65536} {
        test "Kept extents never reach free space unzeroed (a put needs them back; values of $sizes bytes)" {
            r debug zerofree pause
            set keys [zf_fill_pattern keep {*}[list $sizes]]
            r del {*}$keys
            # Eight of them are kept aside for SETs (the small ones are zeroed
            # inline when they leave, the large ones queued); unwritten puts
            # over the whole pool must still read zeros, no INFO in between.
            r del {*}[zf_cover_unwritten keepput $putsize]
            r debug zerofree resume
            assert_equal 0 [zf_field store_pool_used]
        }
    }
}

start_server {tags {mooncake zerofree} overrides {segment-size 16mb}} {
    test {SHUTDOWN with extents still queued: the thread is joined, the process exits cleanly} {
        r debug zerofree pause
        r set a [pattern_bytes [expr {4 * $MiB}] 1]
        r set b [pattern_bytes [expr {4 * $MiB}] 2]
        r del a b
        catch {r shutdown}
        assert_equal 1 [server_exited]
    }
}
