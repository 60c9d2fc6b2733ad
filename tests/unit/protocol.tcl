# The qbuf of the other client (there is exactly one other in these tests).
proc protocol_qbuf_of_others {} {
    set me [r client id]
    foreach line [split [r client list] "\n"] {
        if {[regexp {id=(\d+) .* qbuf=(\d+) } $line -> id q] && $id != $me} { return $q }
    }
    return -1
}

# The wire protocol: inline and multibulk requests, the protocol errors a
# malformed request gets (and that the connection is then closed), request
# size limits, pipelining, requests split into small pieces, RESP3 via
# HELLO, and the unix socket.

# Send bytes on a fresh connection; the reply must be exactly expected.
proc assert_raw_reply {bytes expected {closed 0}} {
    lassign [raw_send_recv $bytes 0 2000] data isclosed
    assert_equal $data $expected
    assert_equal $isclosed $closed "connection closed?"
}

# Send bytes on a fresh connection; the reply must be the protocol error
# matching pattern and the server must close the connection.
proc assert_protocol_error {bytes pattern} {
    lassign [raw_send_recv $bytes 0 3000] data closed
    assert_match "-$pattern\r\n" $data
    assert_equal 1 $closed "connection closed after a protocol error?"
}

start_server {tags {protocol}} {
    test {Inline PING} {
        assert_raw_reply "PING\r\n" "+PONG\r\n"
    }

    test {Inline command terminated by LF alone} {
        assert_raw_reply "PING\n" "+PONG\r\n"
    }

    test {Inline SET with a quoted argument} {
        assert_raw_reply "SET a \"b c\"\r\nGET a\r\n" "+OK\r\n\$3\r\nb c\r\n"
    }

    test {Inline arguments in single quotes and with escapes} {
        assert_raw_reply "SET 'x y' 'it''s'\r\n" "-ERR Protocol error: unbalanced quotes in request\r\n" 1
        assert_raw_reply "SET 'x y' z\r\nGET \"x y\"\r\n" "+OK\r\n\$1\r\nz\r\n"
        assert_raw_reply "ECHO \"\\x41\\n\\t\"\r\n" "\$3\r\nA\n\t\r\n"
    }

    test {Inline empty argument} {
        assert_raw_reply "SET e \"\"\r\nSTRLEN e\r\n" "+OK\r\n:0\r\n"
    }

    test {Inline unbalanced quotes} {
        assert_protocol_error "SET a \"b c\r\n" {ERR Protocol error: unbalanced quotes in request}
    }

    test {Empty lines between commands are ignored} {
        assert_raw_reply "\r\n\r\n\n\nPING\r\n\r\nPING\r\n" "+PONG\r\n+PONG\r\n"
    }

    test {Multibulk lengths of zero or less are ignored} {
        assert_raw_reply "*-10\r\nPING\r\n" "+PONG\r\n"
        assert_raw_reply "*0\r\n*1\r\n\$4\r\nPING\r\n" "+PONG\r\n"
    }

    test {Invalid multibulk length} {
        assert_protocol_error "*3000000000\r\n" {ERR Protocol error: invalid multibulk length}
        assert_protocol_error "*abc\r\n" {ERR Protocol error: invalid multibulk length}
    }

    test {Invalid bulk length} {
        assert_protocol_error "*1\r\n\$-10\r\n" {ERR Protocol error: invalid bulk length}
        assert_protocol_error "*1\r\n\$2000000000\r\n" {ERR Protocol error: invalid bulk length}
        assert_protocol_error "*1\r\n\$abc\r\n" {ERR Protocol error: invalid bulk length}
    }

    test {Bulk without its dollar sign} {
        assert_protocol_error "*1\r\nfoo\r\n" {ERR Protocol error: expected '$', got 'f'}
    }

    test {Too big inline request} {
        assert_protocol_error [string repeat a 70000] {ERR Protocol error: too big inline request}
    }

    test {The server keeps serving after protocol errors} {
        r ping
    } {PONG}

    test {Multibulk request with a binary-safe payload} {
        set v "a\r\nb\x00c"
        assert_raw_reply [::redis::format_command SET bk $v][::redis::format_command GET bk] \
            "+OK\r\n\$[string length $v]\r\n$v\r\n"
    }

    test {A request split into single bytes} {
        set fd [raw_connect]
        set req [::redis::format_command SET split value][::redis::format_command GET split]
        set i 0
        foreach c [split $req {}] {
            puts -nonewline $fd $c
            flush $fd
            if {[incr i] % 8 == 0} { after 1 }
        }
        lassign [raw_read $fd] data
        close $fd
        set data
    } "+OK\r\n\$5\r\nvalue\r\n"

    test {Pipelining 10000 commands in one write} {
        r flushall
        set rd [redis_deferring_client]
        set buf {}
        for {set i 0} {$i < 10000} {incr i} {
            append buf [::redis::format_command set pipe:$i $i]
        }
        $rd write $buf
        $rd flush
        for {set i 0} {$i < 10000} {incr i} {
            set rep [$rd read]
            if {$rep ne "OK"} { fail "reply $i was '$rep'" }
        }
        set buf {}
        for {set i 0} {$i < 10000} {incr i} {
            append buf [::redis::format_command get pipe:$i]
        }
        $rd write $buf
        $rd flush
        for {set i 0} {$i < 10000} {incr i} {
            set rep [$rd read]
            if {$rep ne $i} { fail "GET pipe:$i returned '$rep'" }
        }
        $rd close
        r dbsize
    } {10000}

    test {Pipelining inline and multibulk requests together} {
        set rd [redis_deferring_client]
        $rd write "PING\r\n[::redis::format_command echo hello]SET il 5\r\n[::redis::format_command get il]"
        $rd flush
        set out {}
        for {set i 0} {$i < 4} {incr i} { lappend out [$rd read] }
        $rd close
        set out
    } {PONG hello OK 5}

    test {Command names in one pipeline: any case, near misses, unknown and long names} {
        # The server remembers the last names it found, byte for byte
        # (server.c, lookupBySds): a name of the same length, another
        # case or an unknown one in between must each be looked up anew.
        set rd [redis_deferring_client]
        set long [string repeat x 40]
        set cmds {}
        foreach cmd [list {SET cn v} {GET cn} {get cn} {GEX cn} {gEt cn} [list $long cn] {EXISTS cn} \
                         {GET cn} {EXISTX cn} {exists cn} {GET cn} {exists cn}] {
            append cmds [::redis::format_command {*}$cmd]
        }
        $rd write $cmds
        $rd flush
        set out {}
        for {set i 0} {$i < 12} {incr i} {
            if {[catch {$rd read} reply]} { set reply [lindex [split $reply] 0] }
            lappend out $reply
        }
        $rd close
        set out
    } {OK v v ERR v ERR 1 v ERR 1 v 1}

    test {A reader much slower than the replies: 200 x 100 KiB} {
        set v [pattern_bytes 102400 5]
        r set bigread $v
        set rd [redis_deferring_client]
        set buf {}
        for {set i 0} {$i < 200} {incr i} {
            append buf [::redis::format_command get bigread]
        }
        $rd write $buf
        $rd flush
        after 200
        for {set i 0} {$i < 200} {incr i} {
            if {[$rd read] ne $v} { fail "reply $i differs" }
        }
        $rd close
    }

    test {A 1 MiB+ value sent in many small pieces} {
        set v [pattern_bytes [expr {1048576 + 12345}] 9]
        set req [::redis::format_command SET pieces $v]
        set fd [raw_connect]
        set len [string length $req]
        set n 0
        for {set off 0} {$off < $len} {incr off 997} {
            puts -nonewline $fd [string range $req $off [expr {$off + 996}]]
            flush $fd
            if {[incr n] % 64 == 0} { after 1 }
        }
        lassign [raw_read $fd 5000] data
        close $fd
        assert_equal "+OK\r\n" $data
        assert_equal [string length $v] [r strlen pieces]
        assert {[r get pieces] eq $v}
    }

    # Large arguments (read in place from PROTO_BIG_ARG, 32 KiB) back to back
    # with small commands in one pipeline: each payload starts inside a read
    # that also holds the previous request's tail.
    test {Pipelined SETs of 1 B .. 200 KiB between ECHOs, then GETs} {
        set sizes {65536 32768 65536 131071 131072 1 204800 40000 65536 70000}
        set buf {}
        set i 0
        foreach n $sizes {
            append buf [::redis::format_command SET hint:$i [pattern_bytes $n $i]]
            append buf [::redis::format_command ECHO hint$i]
            incr i
        }
        set rd [redis_deferring_client]
        $rd write $buf
        $rd flush
        set i 0
        foreach n $sizes {
            assert_equal OK [$rd read]
            assert_equal hint$i [$rd read]
            incr i
        }
        $rd close
        set i 0
        foreach n $sizes {
            assert {[r get hint:$i] eq [pattern_bytes $n $i]}
            incr i
        }
        r strlen hint:6
    } {204800}

    # Payloads of 1 MiB or more are read with SO_RCVLOWAT raised (networking.c):
    # it must drop back the moment the payload is in, and a peer that goes
    # away must still wake the server.
    test {After a 2 MiB SET, a small command in its own write is answered at once} {
        set fd [raw_connect]
        puts -nonewline $fd [::redis::format_command SET lowat [pattern_bytes 2097152 3]]
        flush $fd
        lassign [raw_read $fd 5000] data
        assert_equal "+OK\r\n" $data
        set t0 [clock milliseconds]
        puts -nonewline $fd "PING\r\n"
        flush $fd
        lassign [raw_read $fd 3000 20] data
        set took [expr {[clock milliseconds] - $t0}]
        close $fd
        assert_equal "+PONG\r\n" $data
        assert_lessthan $took 1000
        r strlen lowat
    } {2097152}

    test {A client that disconnects in the middle of a 4 MiB bulk is let go at once} {
        r del halfway4m
        set before [s connected_clients]
        set fd [raw_connect]
        puts -nonewline $fd "*3\r\n\$3\r\nSET\r\n\$9\r\nhalfway4m\r\n\$4194304\r\n[string repeat x 1500000]"
        flush $fd
        wait_for_condition 50 20 {[s connected_clients] == $before + 1} else {
            fail "the client never showed up"
        }
        close $fd
        wait_for_condition 50 20 {[s connected_clients] == $before} else {
            fail "the server did not notice the half-sent 4 MiB SET's client leave"
        }
        r exists halfway4m
    } {0}

    test {A client that disconnects in the middle of a bulk} {
        r del halfway
        set fd [raw_connect]
        puts -nonewline $fd "*3\r\n\$3\r\nSET\r\n\$7\r\nhalfway\r\n\$100000\r\n[string repeat x 5000]"
        flush $fd
        after 50
        close $fd
        # Everyone else is still served, and the half-sent SET did nothing.
        set c [redis_client]
        assert_equal PONG [$c ping]
        assert_equal 0 [$c exists halfway]
        $c close
        r ping
    } {PONG}

    test {QUIT in a pipeline: later commands are not run} {
        r del q
        lassign [raw_send_recv "SET q 1\r\nQUIT\r\nSET q 2\r\n"] data closed
        assert_equal "+OK\r\n+OK\r\n" $data
        assert_equal 1 $closed
        r get q
    } {1}

    test {A request with 10000 arguments} {
        set args {}
        for {set i 0} {$i < 9999} {incr i} { lappend args pipe:$i }
        set res [r mget {*}$args]
        assert_equal 9999 [llength $res]
        list [lindex $res 0] [lindex $res 9998]
    } {0 9998}

    test {proto-max-bulk-len refuses larger bulks} {
        set old [lindex [r config get proto-max-bulk-len] 1]
        r config set proto-max-bulk-len 1048576
        # Exactly the limit is fine.
        set c [redis_client]
        set v [pattern_bytes 1048576]
        assert_equal OK [$c set atlimit $v]
        $c close
        # One byte more is refused as soon as the length is read.
        assert_protocol_error "*3\r\n\$3\r\nSET\r\n\$4\r\nover\r\n\$1048577\r\n" \
            {ERR Protocol error: invalid bulk length}
        r config set proto-max-bulk-len $old
        assert_equal 0 [r exists over]
        r strlen atlimit
    } {1048576}

    test {client-query-buffer-limit closes a client that exceeds it} {
        set old [lindex [r config get client-query-buffer-limit] 1]
        r config set client-query-buffer-limit 1048576
        set fd [raw_connect]
        # ECHO's argument is buffered in the heap, which the limit is for.
        puts -nonewline $fd "*2\r\n\$4\r\nECHO\r\n\$3000000\r\n"
        set chunk [string repeat x 65536]
        # The server may close while we are still writing.
        for {set i 0} {$i < 40} {incr i} {
            if {[catch {puts -nonewline $fd $chunk; flush $fd}]} break
        }
        set closed [raw_wait_closed $fd 5000]
        catch {close $fd}
        r config set client-query-buffer-limit $old
        assert_equal 1 $closed "connection closed?"
        assert_equal 0 [r exists qbufk]
        r ping
    } {PONG}

    test {HELLO 3 replies with a map of the server's facts} {
        set c [redis_client]
        set reply [$c hello 3]
        assert_equal {%} [string index [$c lastheader] 0]
        foreach f {server version proto id} {
            assert {[dict exists $reply $f]}
        }
        assert_equal 3 [dict get $reply proto]
        assert_match {[0-9]*.[0-9]*} [dict get $reply version]
        assert_not_equal {} [dict get $reply server]
        assert_equal [$c client id] [dict get $reply id]
        $c close
    }

    tags {mooncake} {
        test {HELLO: version is INFO's redis_version, mooncake_version ours} {
            # Clients compare HELLO's version with Redis releases
            # (server.h): it must say the same as INFO's redis_version.
            set c [redis_client]
            set reply [$c hello 3]
            assert_equal [get_info_field r server redis_version] [dict get $reply version]
            assert_equal [get_info_field r server mooncake_version] [dict get $reply mooncake_version]
            assert_equal mooncake [dict get $reply server]
            $c close
        }
    }

    test {HELLO without a version reports the current protocol} {
        set c [redis_client]
        set reply [$c hello]
        assert_equal 2 [dict get $reply proto]
        $c hello 3
        set reply [$c hello]
        $c close
        dict get $reply proto
    } {3}

    test {RESP3 null, integer and map replies} {
        set c [redis_client]
        $c hello 3
        $c del nokey
        assert_equal {} [$c get nokey]
        assert_equal {_} [$c lastheader]
        assert_equal 0 [$c exists nokey]
        assert_equal {:0} [$c lastheader]
        $c set a 1
        assert_equal {1 {}} [$c mget a nokey]
        assert_equal {*2} [$c lastheader]
        set cfg [$c config get maxclients]
        assert_equal {%1} [$c lastheader]
        assert {[dict exists $cfg maxclients]}
        $c close
    }

    test {RESP3 nulls inside arrays} {
        set c [redis_client]
        $c hello 3
        $c set a 1
        $c del nokey
        $c readraw 1
        # In readraw mode the command returns the first line; read the rest.
        set lines [list [$c mget a nokey]]
        for {set i 0} {$i < 3} {incr i} { lappend lines [$c read] }
        $c close
        set lines
    } {*2 {$1} 1 _}

    test {HELLO 2 goes back to RESP2} {
        set c [redis_client]
        $c hello 3
        $c hello 2
        $c get nokey
        set h [$c lastheader]
        $c close
        set h
    } {$-1}

    test {HELLO with an unsupported protocol version} {
        set c [redis_client]
        assert_error {NOPROTO*} {$c hello 4}
        assert_error {NOPROTO*} {$c hello 1}
        # The connection stays on RESP2.
        $c get nokey
        set h [$c lastheader]
        $c close
        set h
    } {$-1}

    test {HELLO 3 SETNAME names the connection} {
        set c [redis_client]
        $c hello 3 SETNAME hello-client
        set name [$c client getname]
        $c close
        set name
    } {hello-client}

    test {Commands over the unix socket} {
        set c [redis_client_unix]
        assert_equal PONG [$c ping]
        assert_equal OK [$c set viaunix "a\x00b"]
        $c close
        r get viaunix
    } "a\x00b"

    test {Pipelining over the unix socket} {
        set c [redis_client_unix 0 1]
        set buf {}
        for {set i 0} {$i < 1000} {incr i} {
            append buf [::redis::format_command echo $i]
        }
        $c write $buf
        $c flush
        for {set i 0} {$i < 1000} {incr i} {
            if {[$c read] ne $i} { fail "reply $i out of order" }
        }
        $c close
    }

    test {Empty requests (*0, *-1) are consumed, not accumulated} {
        set fd [raw_connect]
        puts -nonewline $fd [string repeat "*0\r\n*-1\r\n" 20000]
        flush $fd
        # Nothing else follows: the bytes must not sit in the query buffer.
        set qbuf -1
        wait_for_condition 50 20 {
            [set qbuf [protocol_qbuf_of_others]] == 0
        } else {
            fail "the empty requests stayed in the query buffer (qbuf=$qbuf)"
        }
        puts -nonewline $fd "*1\r\n\$4\r\nPING\r\n"
        flush $fd
        assert_equal "+PONG" [string trim [gets $fd]]
        close $fd
    }
}

start_server {tags {protocol mooncake}} {
    # Redis accepts any count up to INT_MAX and counts only the query buffer
    # (argument bytes only under maxmemory-clients): here the arguments'
    # memory counts too, and a count that could never fit is refused.
    test {A multibulk count the query buffer limit could never hold is refused before its arguments} {
        # 2^31-1 empty arguments are ~48 GiB of pointers and headers: over 1gb.
        assert_protocol_error "*2147483647\r\n" {ERR Protocol error: invalid multibulk length}
        r config set client-query-buffer-limit 1mb
        assert_protocol_error "*100000\r\n" {ERR Protocol error: invalid multibulk length}
        r config set client-query-buffer-limit 1gb
        r ping
    } {PONG}

    test {Empty arguments count against client-query-buffer-limit: the client is closed} {
        r config set client-query-buffer-limit 1mb
        set before [get_info_field r stats client_query_buffer_limit_disconnections]
        set fd [raw_connect]
        # 43000 is under what the limit could hold of empty arguments, so the
        # count is accepted; their pointers and headers then pass 1 MiB,
        # while their bytes on the wire (6 each) and in the query buffer do not.
        puts -nonewline $fd "*43000\r\n"
        set chunk [string repeat "\$0\r\n\r\n" 1000]
        for {set i 0} {$i < 42} {incr i} {
            if {[catch {puts -nonewline $fd $chunk; flush $fd}]} break
        }
        set closed [raw_wait_closed $fd 5000]
        catch {close $fd}
        r config set client-query-buffer-limit 1gb
        assert_equal 1 $closed "connection closed?"
        assert_equal [expr {$before + 1}] [get_info_field r stats client_query_buffer_limit_disconnections]
        r ping
    } {PONG}

    test {Out-of-scope Redis families answer Redis's unknown-command error, and COMMAND lists none} {
        foreach {cmd args} {lpush {l a} sadd {s a} zadd {z 1 a} hset {h f v} xadd {x * f v}
                            eval {{return 1} 0} function {list} geoadd {g 1 1 a} pfadd {p a}} {
            set e [catch {r $cmd {*}$args} err]
            assert_equal 1 $e
            assert_match "ERR unknown command '$cmd', with args beginning with: *" $err
            assert_equal {{}} [r command info $cmd]
        }
    }
}
