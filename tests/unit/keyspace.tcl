# Strings and the keyspace: SET/GET and their options, GETRANGE, STRLEN,
# MGET/MSET, DEL/UNLINK, EXISTS, TYPE, DBSIZE, KEYS, FLUSHALL/FLUSHDB, and
# the errors a Redis client expects for bad arity and unknown commands.

start_server {tags {keyspace}} {
    test {SET and GET an item} {
        r set x foobar
        r get x
    } {foobar}

    test {SET overwrites an existing value} {
        r set x one
        r set x two
        r get x
    } {two}

    test {GET of a missing key is a null reply} {
        r del nokey
        assert_equal {} [r get nokey]
        assert_equal {$-1} [r lastheader]
    }

    test {SET and GET an empty value} {
        r set empty ""
        assert_equal {} [r get empty]
        assert_equal {$0} [r lastheader]
        assert_equal 1 [r exists empty]
        assert_equal 0 [r strlen empty]
    }

    test {SET and GET binary values (every byte value, CR LF, NUL)} {
        set v {}
        for {set i 0} {$i < 256} {incr i} { append v [format %c $i] }
        append v "\r\n\x00\r\n$v"
        r set bin $v
        assert_equal $v [r get bin]
        assert_equal [string length $v] [r strlen bin]
    }

    test {Binary and spaced keys} {
        set k1 "key with spaces"
        set k2 "k\x00\r\n\xff"
        r set $k1 a
        r set $k2 b
        assert_equal a [r get $k1]
        assert_equal b [r get $k2]
        assert_equal 2 [r exists $k1 $k2]
        assert_equal 2 [r del $k1 $k2]
    }

    test {Random binary values round-trip} {
        for {set i 0} {$i < 100} {incr i} {
            set v [randstring 0 300 binary]
            r set rnd:$i $v
            assert_equal $v [r get rnd:$i]
        }
    }

    test {SET and GET a 1 MiB value byte for byte} {
        set v [pattern_bytes 1048576 3]
        r set big1 $v
        assert_equal 1048576 [r strlen big1]
        assert_equal $v [r get big1]
    }

    test {SET and GET an 8 MiB value byte for byte} {
        set v [pattern_bytes [expr {8 * 1048576}] 11]
        r set big8 $v
        assert_equal [expr {8 * 1048576}] [r strlen big8]
        set got [r get big8]
        assert_equal [string length $v] [string length $got]
        assert {$got eq $v}
        # The tail too, through GETRANGE.
        assert_equal [string range $v end-99 end] [r getrange big8 -100 -1]
        r del big1 big8
    }

    test {SET NX sets only a missing key} {
        r del nx
        assert_equal OK [r set nx first NX]
        assert_equal {} [r set nx second NX]
        assert_equal {$-1} [r lastheader]
        r get nx
    } {first}

    test {SET XX sets only an existing key} {
        r del xx
        assert_equal {} [r set xx first XX]
        assert_equal 0 [r exists xx]
        r set xx first
        assert_equal OK [r set xx second XX]
        r get xx
    } {second}

    test {SET options are case-insensitive} {
        r del ci
        assert_equal OK [r set ci v nx]
        assert_equal OK [r set ci w xX]
        assert_equal OK [r set ci z Ex 100]
        r get ci
    } {z}

    test {SET GET returns the old value} {
        r del g
        assert_equal {} [r set g one GET]
        assert_equal {$-1} [r lastheader]
        assert_equal one [r set g two GET]
        r get g
    } {two}

    test {SET GET with XX on a missing key does not create it} {
        r del g2
        assert_equal {} [r set g2 v XX GET]
        r exists g2
    } {0}

    test {SET EX and PX set a time to live} {
        r set ex v EX 100
        assert_range [r ttl ex] 90 100
        r set px v PX 100000
        assert_range [r pttl px] 90000 100000
    }

    test {SET syntax errors} {
        assert_error {ERR syntax error*} {r set k v NX XX}
        assert_error {ERR syntax error*} {r set k v EX 10 PX 100}
        assert_error {ERR syntax error*} {r set k v EX}
        assert_error {ERR syntax error*} {r set k v PX}
        assert_error {ERR syntax error*} {r set k v FOO}
        assert_equal 0 [r exists k]
    }

    test {SET with an invalid expire time} {
        assert_error {ERR invalid expire time in 'set' command*} {r set k v EX 0}
        assert_error {ERR invalid expire time in 'set' command*} {r set k v EX -1}
        assert_error {ERR invalid expire time in 'set' command*} {r set k v PX 0}
        assert_error {ERR invalid expire time in 'set' command*} {r set k v PX -100}
        assert_error {ERR value is not an integer or out of range*} {r set k v EX abc}
        assert_error {ERR value is not an integer or out of range*} {r set k v PX 1.5}
        assert_equal 0 [r exists k]
    }

    test {GETRANGE} {
        r set hw "Hello World"
        assert_equal Hello [r getrange hw 0 4]
        assert_equal World [r getrange hw -5 -1]
        assert_equal "Hello World" [r getrange hw 0 -1]
        assert_equal "Hello World" [r getrange hw -100 100]
        assert_equal {} [r getrange hw 5 3]
        assert_equal {} [r getrange hw 100 200]
        assert_equal d [r getrange hw -1 -1]
        assert_equal {} [r getrange nokey 0 -1]
        assert_error {ERR value is not an integer or out of range*} {r getrange hw a b}
    }

    test {GETRANGE on binary data} {
        r set gb "a\x00b\r\nc"
        r getrange gb 1 3
    } "\x00b\r"

    test {STRLEN} {
        r set s 12345
        assert_equal 5 [r strlen s]
        assert_equal 0 [r strlen nokey]
    }

    test {MSET and MGET} {
        assert_equal OK [r mset m1 a m2 b m3 c]
        assert_equal {a b c} [r mget m1 m2 m3]
    }

    test {MGET with missing keys returns null elements} {
        r del nokey
        r mget m1 nokey m3
    } {a {} c}

    test {MSET overwrites values and clears their time to live} {
        r set m1 old EX 100
        r mset m1 new
        assert_equal new [r get m1]
        r ttl m1
    } {-1}

    test {MSET and MGET arity errors} {
        assert_error {ERR wrong number of arguments for 'mset' command*} {r mset a}
        assert_error {ERR wrong number of arguments for 'mset' command*} {r mset a b c}
        assert_error {ERR wrong number of arguments for 'mset' command*} {r mset}
        assert_error {ERR wrong number of arguments for 'mget' command*} {r mget}
    }

    test {DEL removes several keys and counts them} {
        r mset d1 a d2 b d3 c
        assert_equal 2 [r del d1 d2 nokey]
        assert_equal 0 [r exists d1 d2]
        assert_equal 1 [r del d3 d3]
        assert_equal 0 [r del d1]
    }

    test {UNLINK removes several keys and counts them} {
        r mset u1 a u2 b u3 c
        assert_equal 3 [r unlink u1 u2 u3 nokey]
        assert_equal 0 [r exists u1 u2 u3]
        assert_equal 0 [r unlink u1]
    }

    test {EXISTS counts every argument, duplicates included} {
        r set e1 a
        r del nokey
        assert_equal 1 [r exists e1]
        assert_equal 0 [r exists nokey]
        assert_equal 3 [r exists e1 e1 e1]
        assert_equal 2 [r exists e1 nokey e1]
    }

    test {TYPE} {
        r set t v
        r del nokey
        assert_equal string [r type t]
        assert_equal none [r type nokey]
    }

    test {DBSIZE follows additions and deletions} {
        r flushall
        assert_equal 0 [r dbsize]
        for {set i 0} {$i < 100} {incr i} { r set n:$i $i }
        assert_equal 100 [r dbsize]
        r set n:0 again
        assert_equal 100 [r dbsize]
        r del n:0 n:1
        r dbsize
    } {98}

    test {Many keys through one MSET} {
        r flushall
        set args {}
        for {set i 0} {$i < 10000} {incr i} { lappend args key:$i val:$i }
        r mset {*}$args
        assert_equal 10000 [r dbsize]
        assert_equal {val:0 val:5000 val:9999} [r mget key:0 key:5000 key:9999]
    }

    test {KEYS with an empty keyspace} {
        r flushall
        r keys *
    } {}

    foreach k {hello hallo hxllo hllo heeeello h*llo h?llo h\[llo habc other} {
        r set $k 1
    }

    foreach {pattern expected} {
        *          {h*llo h?llo habc hallo heeeello hello hllo hxllo h[llo other}
        h?llo      {h*llo h?llo hallo hello hxllo h[llo}
        h*llo      {h*llo h?llo hallo heeeello hello hllo hxllo h[llo}
        h[ae]llo   {hallo hello}
        h[^e]llo   {h*llo h?llo hallo hxllo h[llo}
        h[a-b]llo  {hallo}
        {h\*llo}   {h*llo}
        {h\?llo}   {h?llo}
        {h\[llo}   {h[llo}
        h??        {}
        h???       {habc hllo}
        other      {other}
        nomatch*   {}
    } {
        test "KEYS $pattern" {
            lsort [r keys $pattern]
        } [lsort $expected]
    }

    test {FLUSHDB empties the keyspace} {
        r mset f1 a f2 b
        assert_equal OK [r flushdb]
        assert_equal 0 [r dbsize]
        assert_equal {} [r keys *]
        r get f1
    } {}

    test {FLUSHALL empties the keyspace} {
        r mset f1 a f2 b
        r set f3 c EX 100
        assert_equal OK [r flushall]
        assert_equal 0 [r dbsize]
        assert_equal 0 [r exists f1 f2 f3]
    }

    test {Keys set after FLUSHALL are readable} {
        r flushall
        r set after flush
        r get after
    } {flush}

    test {Wrong number of arguments} {
        foreach cmd {
            {get} {get a b} {set a} {getrange a 0} {strlen} {strlen a b}
            {del} {unlink} {exists} {type} {type a b} {keys} {keys a b}
            {dbsize x} {expire a} {ttl} {persist}
        } {
            set name [lindex $cmd 0]
            assert_error "ERR wrong number of arguments for '$name' command*" {r {*}$cmd}
        }
    }

    test {Unknown command} {
        assert_error {ERR unknown command*} {r foobarbaz}
        assert_error {ERR unknown command 'foo', with args beginning with: 'bar'*} {r foo bar baz}
        # The connection stays usable.
        r ping
    } {PONG}

    test {SELECT 0 is accepted} {
        r select 0
    } {OK}

    tags {mooncake} {
        test {SELECT of any other database is an error} {
            assert_error {ERR*} {r select 1}
            r ping
        } {PONG}
    }
}
