# Memory per idle client (issue 13 item 6): an idle connection gives back
# its reply buffer and its query buffer, so thousands of idle clients cost
# little. Measured through CLIENT LIST (rbs, qbuf, tot-mem) and INFO memory
# (used_memory_heap), not timed: the buffers go within a few cron visits.

proc idle_fields {line} {
    set d {}
    foreach kv [split [string trim $line] " "] {
        set i [string first = $kv]
        if {$i > 0} { dict set d [string range $kv 0 [expr {$i - 1}]] [string range $kv [expr {$i + 1}] end] }
    }
    return $d
}

start_server {tags {mooncake client}} {
    test {Idle clients give back their reply and query buffers (CLIENT LIST rbs, qbuf, tot-mem)} {
        set heap0 [get_info_field r memory used_memory_heap]
        set clients {}
        for {set i 0} {$i < 200} {incr i} {
            set c [redis_client]
            $c client setname idle-$i
            assert_equal PONG [$c ping]
            lappend clients $c
        }
        set heap1 [get_info_field r memory used_memory_heap]
        # While fresh, each holds 16 KiB buffers.
        assert_morethan [expr {($heap1 - $heap0) / 200}] 16384
        wait_for_condition 100 100 {
            [regexp -all {name=idle-[0-9]+ [^\n]* rbs=0 } [r client list]] == 200
        } else {
            fail "idle clients still hold reply buffers:\n[r client list]"
        }
        foreach line [split [r client list] "\n"] {
            set f [idle_fields $line]
            if {![dict exists $f name] || ![string match idle-* [dict get $f name]]} continue
            assert_equal 0 [dict get $f qbuf]
            assert_equal 0 [dict get $f rbs]
            assert_lessthan [dict get $f tot-mem] 2048
        }
        set heap2 [get_info_field r memory used_memory_heap]
        assert_lessthan [expr {($heap2 - $heap0) / 200}] 2048
        # They work as before once they speak again.
        foreach c $clients { assert_equal PONG [$c ping] }
        assert_equal [string repeat x 100000] [[lindex $clients 0] echo [string repeat x 100000]]
        foreach c $clients { $c close }
    }

    test {A client with a reply still queued keeps its buffer} {
        set c [redis_deferring_client]
        $c client setname busy
        $c flush
        $c read
        # A request and no read of its reply, several times: the replies wait in the buffer
        # only while the socket's send buffer is full; a 1-byte value keeps it small, so
        # what the cron must not do is drop bytes: read them all back after the idle time.
        for {set i 0} {$i < 10} {incr i} { $c echo reply-$i }
        $c flush
        after 3500
        for {set i 0} {$i < 10} {incr i} { assert_equal reply-$i [$c read] }
        $c close
    }
}
