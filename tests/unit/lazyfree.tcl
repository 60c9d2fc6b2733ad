# FLUSHALL ASYNC (issue 25, finding 8): the keyspace is empty at once and
# what it held is freed in slices from the event loop, so the loop serves
# other commands meanwhile (the synchronous flush stalled it 1 s per million
# keys). lazyfree_pending_objects (INFO memory, Redis's name) counts the
# keys not yet freed. The order of replies shows the loop was free: no
# clock is read.

# n keys of a 100-byte value, through MSETs of 5000 pairs.
proc lazyfree_fill {n} {
    set v [string repeat v 100]
    for {set i 0} {$i < $n} {incr i 5000} {
        set args {}
        for {set j $i} {$j < $i + 5000 && $j < $n} {incr j} { lappend args k:$j $v }
        r mset {*}$args
    }
}

start_server {tags {keyspace mooncake} overrides {segment-size 256mb}} {
    test {FLUSHALL ASYNC: empty at once, writable at once, freed while other commands are served} {
        lazyfree_fill 300000
        assert_equal 300000 [r dbsize]
        set pool [get_info_field r memory used_memory_pool]
        # One write: the server parses and answers all of it before any
        # cron or beforeSleep slice could have freed the 300000 keys.
        set fd [raw_connect]
        puts -nonewline $fd "FLUSHALL ASYNC\r\nDBSIZE\r\nSET after v\r\nGET after\r\nINFO memory\r\n"
        flush $fd
        set got {}
        while {![string match "*lazyfree_pending_objects:*\r\n*" $got]} {
            lassign [raw_read $fd 5000] data closed
            append got $data
            if {$closed || $data eq {}} break
        }
        close $fd
        assert_match "+OK\r\n:0\r\n+OK\r\n\$1\r\nv\r\n*" $got
        assert {[regexp {lazyfree_pending_objects:(\d+)} $got -> pending]}
        assert_morethan $pending 0
        assert_lessthan_equal $pending 300000
        # Another client is served while the rest is freed, and everything goes.
        assert_equal PONG [r ping]
        wait_for_condition 500 20 {[get_info_field r memory lazyfree_pending_objects] == 0} else {
            fail "FLUSHALL ASYNC never finished freeing"
        }
        assert_lessthan [get_info_field r memory used_memory_pool] [expr {$pool / 10}]
        assert_equal 1 [r dbsize]
        assert_equal v [r get after]
    }

    test {FLUSHALL ASYNC twice in a row, and FLUSHALL SYNC while one is being freed} {
        lazyfree_fill 50000
        r flushall async
        lazyfree_fill 50000
        r flushall async
        r set x y
        r flushall sync
        assert_equal 0 [r dbsize]
        wait_for_condition 500 20 {[get_info_field r memory lazyfree_pending_objects] == 0} else {
            fail "FLUSHALL ASYNC never finished freeing"
        }
    }
}

start_server {tags {keyspace mooncake} overrides {segment-size 4mb evict-policy noeviction}} {
    test {A write that needs the space a FLUSHALL ASYNC is freeing gets it, without -OOM} {
        set v [string repeat x 1000]
        set n 0
        while {![catch {r set fill:$n $v}]} { incr n }
        assert_morethan $n 1000
        # In one write: SET runs before any slice of the flush was freed,
        # finds the pool full, and frees the flushed objects it needs.
        set big [string repeat y 100000]
        set fd [raw_connect]
        puts -nonewline $fd "FLUSHALL ASYNC\r\n*3\r\n\$3\r\nSET\r\n\$3\r\nbig\r\n\$100000\r\n$big\r\nSTRLEN big\r\n"
        flush $fd
        set got {}
        while {![string match "*:100000\r\n" $got] && ![string match "*-*" $got]} {
            lassign [raw_read $fd 5000] data closed
            append got $data
            if {$closed || $data eq {}} break
        }
        close $fd
        assert_equal "+OK\r\n+OK\r\n:100000\r\n" $got
    }
}
