# The HTTP endpoints (http.c; docs/PROTOCOL.md "HTTP endpoints"): /health,
# /get_all_segments, /query_key and its alias /query, in upstream Mooncake's
# formats; what the library and the route table refuse (malformed requests,
# other methods, bodies, oversized URLs and headers); the bounds (connection
# limit, idle timeout) and that no HTTP client can hold up the event loop;
# ACL (Basic auth, tenants, command permissions); the http-* directives at
# start-up and by CONFIG SET; INFO; cluster mode.
#
# The client is a raw Tcl socket: requests are written byte for byte and
# responses parsed here, so nothing between the test and the server
# normalises either.

source [file join $::harness(testsdir) support cluster.tcl]

# --------------------------------------------------------------- the client

# A response from fd, read until its Content-Length is in (or the peer
# closes, or timeout_ms pass): a dict of status (code, "" if nothing came),
# headers (lower-case names), body, closed (the peer closed after it).
proc http_read {fd {head 0} {timeout_ms 3000}} {
    fconfigure $fd -blocking 0 -translation binary
    set buf ""
    set need -1
    set start 0
    set closed 0
    set deadline [expr {[clock milliseconds] + $timeout_ms}]
    while 1 {
        if {[catch {read $fd} chunk]} { set closed 1; break }
        append buf $chunk
        if {$need < 0} {
            set i [string first "\r\n\r\n" $buf]
            if {$i >= 0} {
                set start [expr {$i + 4}]
                set len 0
                regexp -nocase -line {^content-length:\s*(\d+)} [string range $buf 0 $i] -> len
                set need [expr {$head ? 0 : $len}]
            }
        }
        if {$need >= 0 && [string length $buf] - $start >= $need} break
        if {$chunk eq "" && [eof $fd]} { set closed 1; break }
        if {[clock milliseconds] > $deadline} break
        if {$chunk eq ""} { after 5 }
    }
    fconfigure $fd -blocking 1
    set res [dict create status "" headers {} body "" closed $closed raw $buf]
    set i [string first "\r\n\r\n" $buf]
    if {$i < 0} { return $res }
    set lines [split [string range $buf 0 [expr {$i - 1}]] "\n"]
    regexp {^HTTP/1\.[01] (\d+)} [lindex $lines 0] -> code
    set headers {}
    foreach l [lrange $lines 1 end] {
        if {[regexp {^([^:]+):\s*(.*?)\r?$} $l -> k v]} { dict set headers [string tolower $k] $v }
    }
    dict set res status $code
    dict set res headers $headers
    dict set res body [string range $buf $start [expr {$start + $need - 1}]]
    return $res
}

proc http_connect {port} {
    set fd [socket 127.0.0.1 $port]
    fconfigure $fd -translation binary -buffering none
    return $fd
}

# The request line and headers of a GET-like request. auth: {user pass} or {}.
proc http_request_text {method path auth {extra {}}} {
    set r "$method $path HTTP/1.1\r\nHost: test\r\n"
    if {[llength $auth]} {
        append r "Authorization: Basic [binary encode base64 [join $auth :]]\r\n"
    }
    foreach h $extra { append r "$h\r\n" }
    return "$r\r\n"
}

# One request on its own connection: the response dict.
proc http_do {method path {auth {}} {port {}}} {
    if {$port eq ""} { set port $::hp }
    set fd [http_connect $port]
    puts -nonewline $fd [http_request_text $method $path $auth]
    set res [http_read $fd [expr {$method eq "HEAD"}]]
    close $fd
    return $res
}

proc http_get {path {auth {}} {port {}}} { http_do GET $path $auth $port }
proc http_status {res} { dict get $res status }
proc http_body {res} { dict get $res body }
proc http_header {res name} {
    set h [dict get $res headers]
    if {[dict exists $h $name]} { return [dict get $h $name] }
    return ""
}

# Percent-encoding of every byte that is not unreserved (RFC 3986).
proc urlencode {bytes} {
    set out ""
    foreach ch [split $bytes ""] {
        if {[regexp {^[A-Za-z0-9_.~-]$} $ch]} {
            append out $ch
        } else {
            binary scan $ch c b
            append out [format %%%02X [expr {$b & 0xff}]]
        }
    }
    return $out
}

# The TCP ports process pid listens on (/proc/net/tcp and tcp6).
proc listening_ports {pid} {
    set inodes {}
    foreach f [glob -nocomplain /proc/$pid/fd/*] {
        if {![catch {file readlink $f} l] && [regexp {^socket:\[(\d+)\]$} $l -> ino]} { lappend inodes $ino }
    }
    set ports {}
    foreach t {/proc/net/tcp /proc/net/tcp6} {
        if {[catch {open $t r} f]} continue
        foreach line [lrange [split [read $f] "\n"] 1 end] {
            set w [regexp -all -inline {\S+} $line]
            if {[llength $w] < 10 || [lindex $w 3] ne "0A"} continue
            if {[lindex $w 9] ni $inodes} continue
            lappend ports [expr 0x[lindex [split [lindex $w 1] :] end]]
        }
        close $f
    }
    return [lsort -integer -unique $ports]
}

# The JSON /query_key gives one replica of the pool (segment self).
proc pool_replica {size off} {
    format {{"size_":%d,"buffer_address_":%d,"protocol_":"tcp","transport_endpoint_":"127.0.0.1:%d","segment_name_":"self"}} \
        $size $off [srv 0 port]
}

# Offset of the first replica of key, from OBJECT.INFO.
proc first_offset {key} {
    lindex [lindex [dict get [r object.info $key] replicas] 0] 1
}

# ------------------------------------------------------------------ off

# Threads of process pid.
proc thread_count {pid} { llength [glob -nocomplain /proc/$pid/task/*] }

start_server {tags {http mooncake} overrides {segment-prefault no}} {
    test {http-port 0 (the default): nothing but the RESP port listens} {
        assert_equal 0 [lindex [r config get http-port] 1]
        assert_equal 127.0.0.1 [lindex [r config get http-bind] 1]
        assert_equal 0 [get_info_field r server http_port]
        assert_equal [list [srv 0 port]] [listening_ports [srv 0 pid]]
    }

    test {CONFIG SET http-port turns the endpoints on, with no thread of their own, and 0 off again} {
        set threads [thread_count [srv 0 pid]]
        set p [find_available_port]
        assert_equal OK [r config set http-port $p]
        assert_equal [lsort -integer [list [srv 0 port] $p]] [listening_ports [srv 0 pid]]
        assert_equal 200 [http_status [http_get /health {} $p]]
        assert_equal $threads [thread_count [srv 0 pid]]
        assert_equal $p [get_info_field r server http_port]
        assert_equal OK [r config set http-port 0]
        assert_equal [list [srv 0 port]] [listening_ports [srv 0 pid]]
        assert_error {*} {http_connect $p}
    }

    test {CONFIG SET http-bind checks the address with http-port 0 too, and a bad one changes nothing} {
        # It used to be taken while no listener was wanted, and to fail only
        # at the CONFIG SET http-port that came later.
        foreach bad {abc localhost 999.0.0.1 {} {1.2.3.4 5.6.7.8} -::1} {
            assert_error {ERR CONFIG SET failed (possibly related to argument 'http-bind') - Invalid http-bind address*} \
                {r config set http-bind $bad}
            assert_equal 127.0.0.1 [lindex [r config get http-bind] 1]
        }
        foreach good {0.0.0.0 ::1 * ::* 127.0.0.1} {
            assert_equal OK [r config set http-bind $good]
            assert_equal $good [lindex [r config get http-bind] 1]
        }
        set p [find_available_port]
        assert_equal OK [r config set http-port $p]
        assert_equal 200 [http_status [http_get /health {} $p]]
        assert_equal OK [r config set http-port 0]
    }

    test {A bad http-bind in the configuration stops the start-up, even with http-port 0} {
        lassign [server_start_refusal http-bind --port [find_available_port] --http-bind abc] alive out
        assert_equal 0 $alive
        assert_match "*Invalid http-bind address*abc*" $out
    }
}

# ------------------------------------------------------------ endpoints

set ::hp [find_available_port]
start_server [list tags {http mooncake} overrides [list http-port $::hp segment-size 16mb]] {
    test {Start-up logs the HTTP address} {
        set f [open [srv 0 stdout] r]
        set log [read $f]
        close $f
        assert_match "*HTTP endpoints on http://127.0.0.1:$::hp/*" $log
        assert_equal $::hp [get_info_field r server http_port]
    }

    test {GET /health: 200, application/json, leader and serving} {
        set res [http_get /health]
        assert_equal 200 [http_status $res]
        assert_equal application/json [http_header $res content-type]
        assert_equal {{"status":"ok","role":"leader","ha_state":"serving","service_ready":true,"mode":"standalone"}} \
            [http_body $res]
        assert_equal [string length [http_body $res]] [http_header $res content-length]
    }

    test {HEAD /health: the headers of GET, no body} {
        set get [http_get /health]
        set fd [http_connect $::hp]
        puts -nonewline $fd [http_request_text HEAD /health {}]
        set res [http_read $fd 1]
        # Nothing may follow the headers: a body would be read as the next response.
        after 100
        fconfigure $fd -blocking 0
        set extra [read $fd]
        close $fd
        assert_equal 200 [http_status $res]
        assert_equal [http_header $get content-length] [http_header $res content-length]
        assert_equal {} [http_body $res]
        assert_equal {} $extra
    }

    test {GET /get_all_segments: the pool, then mounted segments as they come and go} {
        set res [http_get /get_all_segments]
        assert_equal 200 [http_status $res]
        assert_equal {text/plain; version=0.0.4} [http_header $res content-type]
        assert_equal "self\n" [http_body $res]
        r mount segA 1mb endpoint tcp://10.0.0.1:7000
        r mount segB 1mb
        assert_equal "self\nsegA\nsegB\n" [http_body [http_get /get_all_segments]]
        r unmount segA
        assert_equal "self\nsegB\n" [http_body [http_get /get_all_segments]]
        r unmount segB
        assert_equal "self\n" [http_body [http_get /get_all_segments]]
    }

    test {/query_key of a SET string: one replica in the pool, at its offset} {
        r set foo barbaz
        set res [http_get /query_key?key=foo]
        assert_equal 200 [http_status $res]
        assert_equal application/json [http_header $res content-type]
        assert_equal "{\"success\":true,\"data\":\[[pool_replica 6 [first_offset foo]]\]}" [http_body $res]
        # /query is the same route.
        assert_equal [http_body $res] [http_body [http_get /query?key=foo]]
    }

    test {/query_key of a PUT object: one entry per memory replica; BASE, rdma and disk segments} {
        r mount segR 1mb endpoint tcp://10.0.0.2:7000 endpoint rdma://10.0.0.2:4791 base 0x100000
        r mount segD 1mb tier disk endpoint tcp://10.0.0.3:7000
        set reps [r put.start obj 100 replicas 2 prefer self prefer segR]
        assert_equal OK [r put.end obj]
        set want {}
        foreach rep $reps {
            lassign $rep seg off len
            if {$seg == 1} {
                lappend want [pool_replica 100 $off]
            } else {
                lappend want [format {{"size_":100,"buffer_address_":%d,"protocol_":"rdma","transport_endpoint_":"10.0.0.2:4791","segment_name_":"segR"}} \
                    [expr {0x100000 + $off}]]
            }
        }
        assert_equal 2 [llength $want]
        assert_equal "{\"success\":true,\"data\":\[[join $want ,]\]}" [http_body [http_get /query_key?key=obj]]
        # A replica on a disk-tier segment is not a memory replica: not listed.
        r put.start ondisk 50 prefer segD
        r put.end ondisk
        assert_equal {{"success":true,"data":[]}} [http_body [http_get /query_key?key=ondisk]]
        r unmount segR
        r unmount segD
        # The replica on segR went with it.
        assert_equal "{\"success\":true,\"data\":\[[pool_replica 100 [first_offset obj]]\]}" \
            [http_body [http_get /query_key?key=obj]]
    }

    test {/query_key of a missing key: 404 OBJECT_NOT_FOUND (-704)} {
        set res [http_get /query_key?key=nosuchkey]
        assert_equal 404 [http_status $res]
        assert_equal application/json [http_header $res content-type]
        assert_equal {{"success":false,"error_code":-704,"error_message":"OBJECT_NOT_FOUND"}} [http_body $res]
    }

    test {/query_key of a pending put: 404 REPLICA_IS_NOT_READY (-703), then the replicas once it ends} {
        set rep [lindex [r put.start pend 64] 0]
        set res [http_get /query_key?key=pend]
        assert_equal 404 [http_status $res]
        assert_equal {{"success":false,"error_code":-703,"error_message":"REPLICA_IS_NOT_READY"}} [http_body $res]
        r put.end pend
        assert_equal "{\"success\":true,\"data\":\[[pool_replica 64 [lindex $rep 1]]\]}" \
            [http_body [http_get /query_key?key=pend]]
    }

    test {/query_key without a key parameter: 400 INVALID_PARAMS} {
        foreach path {/query_key /query_key?other=1 /query} {
            set res [http_get $path]
            assert_equal 400 [http_status $res] $path
            assert_equal {{"success":false,"error_code":-600,"error_message":"INVALID_PARAMS","error":"the query parameter 'key' is missing"}} \
                [http_body $res]
        }
    }

    test {/query_key: percent-encoded and binary keys are decoded by the library} {
        set k1 "a b/c?&=%+#k"
        r set $k1 v1
        set res [http_get /query_key?key=[urlencode $k1]]
        assert_equal "{\"success\":true,\"data\":\[[pool_replica 2 [first_offset $k1]]\]}" [http_body $res]
        # '+' is a space in a query string.
        r set "x y" vvv
        assert_equal "{\"success\":true,\"data\":\[[pool_replica 3 [first_offset {x y}]]\]}" \
            [http_body [http_get /query_key?key=x+y]]
        set k2 "\x00\xff\x01k\x7f\r\n"
        r set $k2 0123456
        assert_equal "%00%FF%01k%7F%0D%0A" [urlencode $k2]
        assert_equal "{\"success\":true,\"data\":\[[pool_replica 7 [first_offset $k2]]\]}" \
            [http_body [http_get /query_key?key=[urlencode $k2]]]
        # A key that only differs after its zero byte is another key.
        assert_equal 404 [http_status [http_get /query_key?key=%00%FF]]
    }

    test {Unknown paths are 404, other methods 405 with Allow} {
        set res [http_get /nope]
        assert_equal 404 [http_status $res]
        assert_match {*"success":false*} [http_body $res]
        assert_equal 404 [http_status [http_get /health/x]]
        # The library decodes the path into a C string: a zero byte must not
        # cut "/health%00x" down to a path that exists.
        foreach path {/health%00x /health%00 /get_all_segments%00?x=1 /query_key%00?key=foo} {
            set res [http_get $path]
            assert_equal 400 [http_status $res] $path
            assert_match {*zero byte*} [http_body $res]
        }
        assert_equal 200 [http_status [http_get /health?x=%00]]
        foreach m {DELETE PUT OPTIONS POST} {
            set res [http_do $m /health]
            assert_equal 405 [http_status $res] $m
            assert_equal {GET, HEAD} [http_header $res allow]
        }
    }

    test {A request with a body is refused 413 unread, and its connection closed} {
        set fd [http_connect $::hp]
        puts -nonewline $fd "POST /query_key?key=foo HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello"
        set res [http_read $fd]
        assert_equal 413 [http_status $res]
        assert_equal 1 [raw_wait_closed $fd 2000]
        close $fd
        # A GET that carries a body is refused the same way; chunked too.
        set fd [http_connect $::hp]
        puts -nonewline $fd "GET /health HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
        assert_equal 413 [http_status [http_read $fd]]
        close $fd
        assert_equal PONG [r ping]
    }

    test {A second Content-Length is looked at too: its body is not read as the next request} {
        # The library frames by the first; "0" then "38" was answered 200 and
        # the 38 bytes after it, a request of their own, answered as well.
        set fd [http_connect $::hp]
        set smuggled "GET /nope HTTP/1.1\r\nHost: t\r\n\r\n"
        puts -nonewline $fd "GET /health HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\nContent-Length: [string length $smuggled]\r\n\r\n$smuggled"
        set first [http_read $fd]
        set closed [raw_wait_closed $fd 2000]
        close $fd
        list [http_status $first] $closed
    } {413 1}

    test {Keep-alive: several requests on one connection} {
        set fd [http_connect $::hp]
        foreach path {/health /get_all_segments /query_key?key=foo /nope} want {200 200 200 404} {
            puts -nonewline $fd [http_request_text GET $path {}]
            set res [http_read $fd]
            assert_equal $want [http_status $res] $path
            assert_equal 0 [dict get $res closed]
        }
        close $fd
    }

    test {Malformed requests get a 4xx/5xx from the library, or a close; the server carries on} {
        # What libmicrohttpd 0.9.75 does with each: a line it cannot split
        # at a space at all is closed without a reply.
        foreach {bad want} [list \
                "GET /health HTTP/9.9\r\n\r\n" 505 \
                "GET /health\r\n\r\n" 400 \
                "GET /health HTTP/1.1\r\nno colon here\r\n\r\n" 400 \
                "GARBAGE\r\n\r\n" closed \
                "GET\r\n\r\n" closed] {
            set fd [http_connect $::hp]
            puts -nonewline $fd $bad
            set res [http_read $fd 0 2000]
            close $fd
            set what [string map {\r \\r \n \\n} $bad]
            if {$want eq "closed"} {
                assert_equal {} [http_status $res] $what
                assert_equal 1 [dict get $res closed] $what
            } else {
                assert_equal $want [http_status $res] $what
            }
        }
        # A method nobody knows reaches the route table: 405.
        assert_equal 405 [http_status [http_do G@T /health]]
        assert_equal 200 [http_status [http_get /health]]
        assert_equal PONG [r ping]
    }

    test {An oversized URL (414) or oversized headers (431) are refused; the server carries on} {
        # The library may answer 414 and close before the client has written
        # the 40 kB (a loaded machine): the write then fails with a reset
        # that takes the answer with it. Such a try is made again; the first
        # answer that arrives must be 414.
        set res {}
        for {set try 0} {$try < 20 && $res eq {}} {incr try} {
            set fd [http_connect $::hp]
            if {[catch {puts -nonewline $fd [http_request_text GET /query_key?key=[string repeat x 40000] {}]}] ||
                [catch {http_read $fd} res]} {
                set res {}
            }
            catch {close $fd}
        }
        assert_equal 414 [http_status $res]
        # The library may answer 431 and close while the client is still
        # writing the 40 kB (a busy machine): the write then fails, and the
        # reset can take the answer with it. An answer that arrives is 431.
        set fd [http_connect $::hp]
        catch {puts -nonewline $fd [http_request_text GET /health {} [list "X-Big: [string repeat y 40000]"]]}
        if {[catch {http_read $fd} res]} { set res {} }
        catch {close $fd}
        if {$res ne {}} { assert_equal 431 [http_status $res] }
        # Within http-max-request-size a long key is fine.
        set k [string repeat k 3000]
        r set $k v
        assert_equal 200 [http_status [http_get /query_key?key=$k]]
        assert_equal 200 [http_status [http_get /health]]
        assert_equal PONG [r ping]
    }

    test {A half-sent request holds up neither RESP clients nor other HTTP clients} {
        set fd [http_connect $::hp]
        puts -nonewline $fd "GET /health HTTP/1.1\r\nHost: t\r\n"
        after 50
        set t0 [clock milliseconds]
        assert_equal PONG [r ping]
        assert_equal 200 [http_status [http_get /get_all_segments]]
        assert_equal PONG [r ping]
        assert_lessthan [expr {[clock milliseconds] - $t0}] 1000
        # Its end comes later: it is answered then.
        puts -nonewline $fd "\r\n"
        assert_equal 200 [http_status [http_read $fd]]
        close $fd
    }

    test {http-maxclients: connections past it wait in the backlog until one closes} {
        r config set http-maxclients 3
        wait_for_condition 100 20 {[get_info_field r clients http_connected_clients] == 0} else {
            fail "HTTP connections of earlier tests still open"
        }
        set idle {}
        for {set i 0} {$i < 3} {incr i} { lappend idle [http_connect $::hp] }
        wait_for_condition 100 20 {[get_info_field r clients http_connected_clients] == 3} else {
            fail "the three connections were not accepted"
        }
        set extra [http_connect $::hp]
        puts -nonewline $extra [http_request_text GET /health {}]
        assert_equal {} [http_status [http_read $extra 0 500]]
        assert_equal 3 [get_info_field r clients http_connected_clients]
        assert_equal PONG [r ping]
        close [lindex $idle 0]
        set res [http_read $extra 0 3000]
        assert_equal 200 [http_status $res]
        close $extra
        foreach fd [lrange $idle 1 end] { close $fd }
        r config set http-maxclients 128
    }

    test {http-timeout: an idle connection is closed after it, not before} {
        r config set http-timeout 1
        set fd [http_connect $::hp]
        set t0 [clock milliseconds]
        assert_equal 1 [raw_wait_closed $fd 4000]
        set waited [expr {[clock milliseconds] - $t0}]
        close $fd
        assert_morethan_equal $waited 900
        # A half-sent request is idle too.
        set fd [http_connect $::hp]
        puts -nonewline $fd "GET /hea"
        assert_equal 1 [raw_wait_closed $fd 4000]
        close $fd
        r config set http-timeout 30
        assert_equal 200 [http_status [http_get /health]]
    }

    test {http-timeout also bounds a request sent a byte at a time, not only idleness} {
        # The library's timeout is one of idleness: a header byte every
        # 200 ms kept the connection, and its slot, for ever.
        r config set http-timeout 1
        set fd [http_connect $::hp]
        fconfigure $fd -blocking 0
        puts -nonewline $fd "GET /health HTTP/1.1\r\nX-Slow: "
        set closed 0
        set deadline [expr {[clock milliseconds] + 8000}]
        while {!$closed && [clock milliseconds] < $deadline} {
            if {[catch {puts -nonewline $fd a; flush $fd}] || [catch {read $fd} chunk] ||
                ($chunk eq "" && [eof $fd])} {
                set closed 1
            }
            after 200
        }
        catch {close $fd}
        r config set http-timeout 30
        assert_equal 200 [http_status [http_get /health]]
        set closed
    } {1}

    test {INFO: HTTP connections, requests and refusals are counted} {
        r config resetstat
        http_get /health
        http_get /nope
        http_do DELETE /health
        http_get /query_key?key=nosuchkey
        assert_equal 4 [get_info_field r stats http_requests]
        assert_equal 2 [get_info_field r stats http_rejected]
        assert_equal 4 [get_info_field r stats http_connections_received]
    }

    test {CONFIG SET http-port to a busy port is refused and changes nothing} {
        assert_error {*http-port*Address already in use*} {r config set http-port [srv 0 port]}
        assert_equal $::hp [lindex [r config get http-port] 1]
        assert_equal $::hp [get_info_field r server http_port]
        assert_equal 200 [http_status [http_get /health]]
        # A bad address too; and several directives at once are all or nothing.
        assert_error {*http-bind*} {r config set http-bind 999.0.0.1}
        assert_equal 127.0.0.1 [lindex [r config get http-bind] 1]
        assert_error {*} {r config set http-timeout 5 http-port [srv 0 port]}
        assert_equal 30 [lindex [r config get http-timeout] 1]
        assert_equal 200 [http_status [http_get /health]]
    }

    test {CONFIG SET http-port moves the endpoints; other http-* keep the socket} {
        set p [find_available_port]
        assert_equal OK [r config set http-port $p]
        assert_error {*} {http_connect $::hp}
        assert_equal 200 [http_status [http_get /health {} $p]]
        # Changing a limit restarts the daemon on the same socket: open
        # connections are closed, one waiting in the backlog is served.
        assert_equal OK [r config set http-maxclients 1]
        set open [http_connect $p]
        wait_for_condition 100 20 {[get_info_field r clients http_connected_clients] == 1} else {
            fail "the connection was not accepted"
        }
        set waiting [http_connect $p]
        puts -nonewline $waiting [http_request_text GET /health {}]
        assert_equal {} [http_status [http_read $waiting 0 300]]
        assert_equal OK [r config set http-max-request-size 64kb http-timeout 20 http-maxclients 128]
        assert_equal 1 [raw_wait_closed $open 2000]
        close $open
        assert_equal 200 [http_status [http_read $waiting]]
        close $waiting
        assert_equal 200 [http_status [http_get /health {} $p]]
        assert_equal OK [r config set http-port $::hp]
        assert_equal 200 [http_status [http_get /health]]
        assert_equal [lsort -integer [list [srv 0 port] $::hp]] [listening_ports [srv 0 pid]]
    }

    test {CONFIG REWRITE writes the http-* directives that are not at their default} {
        r config rewrite
        set f [open [srv 0 config_file] r]
        set conf [read $f]
        close $f
        assert_match "*http-port $::hp*" $conf
        assert_match "*http-max-request-size 64kb*" $conf
        assert_match "*http-timeout 20*" $conf
    }
}

tags {http mooncake} {
    test {A server whose http-port is busy does not start, and says why} {
        set busy [find_available_port]
        set holder [socket -server __never__ -myaddr 127.0.0.1 $busy]
        lassign [server_start_refusal http-start --port [find_available_port] --http-port $busy \
                     --segment-size 1mb] alive out
        close $holder
        assert_equal 0 $alive
        assert_match "*Failed listening for HTTP*127.0.0.1:$busy*Address already in use*" $out
    }
}

# ------------------------------------------------------------------ ACL

set ::hp [find_available_port]
start_server [list tags {http mooncake acl} overrides [list http-port $::hp segment-size 16mb requirepass s3cret]] {
    r auth s3cret

    test {With a password, a request without credentials is 401 with a Basic challenge} {
        foreach path {/health /get_all_segments /query_key?key=foo /nope} {
            set res [http_get $path]
            assert_equal 401 [http_status $res] $path
            assert_equal {Basic realm="mooncake"} [http_header $res www-authenticate]
            assert_match {*NOAUTH*} [http_body $res]
        }
    }

    test {Wrong credentials are 401, logged in ACL LOG and counted as a failed AUTH} {
        r acl log reset
        set before [get_info_field r stats acl_access_denied_auth]
        foreach auth {{default wrong} {nobody s3cret} {default {}}} {
            set res [http_get /health $auth]
            assert_equal 401 [http_status $res] $auth
            assert_equal {Basic realm="mooncake"} [http_header $res www-authenticate]
        }
        assert_equal [expr {$before + 3}] [get_info_field r stats acl_access_denied_auth]
        set e [lindex [r acl log] 0]
        assert_equal auth [dict get $e reason]
        assert_equal http [dict get $e object]
        assert_equal default [dict get $e username]
        assert_match {*proto=http*GET /health*} [dict get $e client-info]
    }

    test {Basic credentials are bytes: a zero byte in the password is neither dropped nor an end} {
        # The library's parser returned C strings: "pa\0junk" was checked
        # as "pa", and a password holding a zero byte could never be given.
        r acl setuser zp1 on >pa ~* +@all
        r acl setuser zp2 on ">pa\x00ss" ~* +@all
        set got {}
        foreach auth [list [list zp1 "pa\x00junk"] [list zp1 pa] [list zp2 "pa\x00ss"] [list zp2 pa] \
                          [list "zp1\x00x" pa]] {
            lappend got [http_status [http_get /health $auth]]
        }
        r acl deluser zp1 zp2
        set got
    } {401 200 200 401 401}

    test {A failed login's user name is logged escaped: a newline in it forges no log line} {
        r config set loglevel verbose
        set res [http_get /health [list "eve\nforged line" wrong]]
        assert_equal 401 [http_status $res]
        set f [open [srv 0 stdout] r]
        set log [read $f]
        close $f
        r config set loglevel notice
        assert_match {*authentication failed for user "eve\\nforged line"*} $log
        assert_equal 0 [llength [lsearch -all -regexp [split $log \n] {^forged line}]]
    }

    test {The default user's password (requirepass) opens every path} {
        assert_equal 200 [http_status [http_get /health {default s3cret}]]
        assert_equal "self\n" [http_body [http_get /get_all_segments {default s3cret}]]
        r set foo bar
        assert_equal 200 [http_status [http_get /query_key?key=foo {default s3cret}]]
    }

    test {A user that is off cannot use its password} {
        r acl setuser off1 off >pw ~* +@all
        assert_equal 401 [http_status [http_get /health {off1 pw}]]
        r acl setuser off1 on
        assert_equal 200 [http_status [http_get /health {off1 pw}]]
    }

    test {A user without the route's command is 403 (SEGMENTS, OBJECT.INFO, PING), logged} {
        r acl setuser noseg on >pw ~* +@all -segments -object.info
        r acl log reset
        set res [http_get /get_all_segments {noseg pw}]
        assert_equal 403 [http_status $res]
        assert_match {*NOPERM*segments*} [http_body $res]
        assert_equal 403 [http_status [http_get /query_key?key=foo {noseg pw}]]
        assert_equal 200 [http_status [http_get /health {noseg pw}]]
        set e [lindex [r acl log] 0]
        assert_equal command [dict get $e reason]
        assert_equal object.info [dict get $e object]
        assert_equal noseg [dict get $e username]
        r acl setuser noping on >pw ~* -@all +segments
        assert_equal 403 [http_status [http_get /health {noping pw}]]
        assert_equal 200 [http_status [http_get /get_all_segments {noping pw}]]
    }

    test {A refusal naming a user whose name is not UTF-8 is still its JSON error} {
        # json_pack refused the message, and the body said "out of memory".
        set name "caf\xe9\x01"
        r acl setuser $name on >pw ~* -@all
        set res [http_get /health [list $name pw]]
        r acl deluser $name
        assert_equal 403 [http_status $res]
        http_body $res
    } {{"success":false,"error":"NOPERM User caf\\xe9\\x01 has no permissions to run the 'ping' command"}}

    test {A tenant sees its own segments and the shared ones, and only its keys} {
        r acl setuser ta on >pa ~tenantA:* +@all
        r acl setuser tb on >pb ~tenantB:* +@all
        set ca [redis_client]
        $ca auth ta pa
        set cb [redis_client]
        $cb auth tb pb
        $ca mount segTA 1mb
        $cb mount segTB 1mb
        r mount segShared 1mb
        assert_equal "self\nsegTA\nsegShared\n" [http_body [http_get /get_all_segments {ta pa}]]
        assert_equal "self\nsegTB\nsegShared\n" [http_body [http_get /get_all_segments {tb pb}]]
        assert_equal "self\nsegTA\nsegTB\nsegShared\n" [http_body [http_get /get_all_segments {default s3cret}]]
        # Keys: its own pattern only, as OBJECT.INFO over RESP.
        $ca set tenantA:k aaaa
        $cb set tenantB:k bbbb
        assert_equal 200 [http_status [http_get /query_key?key=tenantA:k {ta pa}]]
        r acl log reset
        set res [http_get /query_key?key=tenantB:k {ta pa}]
        assert_equal 403 [http_status $res]
        assert_match {*NOPERM*key*} [http_body $res]
        # Whether it exists or not, the answer is the same.
        assert_equal 403 [http_status [http_get /query_key?key=tenantB:missing {ta pa}]]
        set e [lindex [r acl log] 0]
        assert_equal key [dict get $e reason]
        assert_equal tenantB:missing [dict get $e object]
        assert_equal ta [dict get $e username]
        assert_equal 200 [http_status [http_get /query_key?key=tenantB:k {tb pb}]]
        $ca close
        $cb close
    }

    test {Without a password the endpoints are open again, as RESP is} {
        r config set requirepass ""
        assert_equal 200 [http_status [http_get /health]]
        assert_equal 200 [http_status [http_get /query_key?key=foo]]
        # Credentials that are given are still checked.
        assert_equal 401 [http_status [http_get /health {ta wrong}]]
        assert_equal 200 [http_status [http_get /health {ta pa}]]
    }
}

# -------------------------------------------------------------- cluster

cluster_block mooncake {nodes 3 timeout 2000 tags {http}} {
    test {Cluster: /query_key on the key's node answers, elsewhere 404 naming the owner} {
        cluster_create
        set ports {}
        foreach i {0 1 2} {
            set p [find_available_port]
            R $i config set http-port $p
            lappend ports $p
        }
        set key httpkey
        set slot [R 0 cluster keyslot $key]
        set owner -1
        foreach i {0 1 2} {
            if {![catch {R $i set $key value}]} { set owner $i }
        }
        assert_morethan_equal $owner 0
        foreach i {0 1 2} {
            set res [http_get /query_key?key=$key {} [lindex $ports $i]]
            if {$i == $owner} {
                assert_equal 200 [http_status $res]
                assert_match {*"success":true*"size_":5*} [http_body $res]
            } else {
                assert_equal 404 [http_status $res]
                assert_equal [format {{"success":false,"error_code":-704,"error_message":"OBJECT_NOT_FOUND","slot":%d,"node":"%s"}} \
                    $slot [cluster_addr $owner]] [http_body $res]
            }
            set res [http_get /health {} [lindex $ports $i]]
            assert_equal {{"status":"ok","role":"leader","ha_state":"serving","service_ready":true,"mode":"cluster"}} \
                [http_body $res]
        }
    }
}
