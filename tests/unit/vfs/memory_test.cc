// The memory provider's tree, driven directly through struct ws_vfs_ops.
#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <string>
#include <thread>
#include <vector>

extern "C" {
#include "server/base/errors.h"
#include "server/providers/memory.h"
#include "server/vfs/vfs.h"
}

namespace
{

class MemFs : public ::testing::Test
{
  protected:
    void SetUp() override
    {
        ASSERT_EQ(ws_memfs_new(&fs_), 0);
        ops_ = fs_->ops;
    }
    void TearDown() override
    {
        ops_->destroy(fs_);
    }

    int Put(const std::string &path, const std::string &data, ws_write_opts o = {})
    {
        ws_vfs_writer *w = nullptr;
        int r = ops_->write_begin(fs_, path.c_str(), &o, &w);
        if (r < 0)
            return r;
        r = ops_->write(w, data.data(), data.size());
        if (r < 0) {
            ops_->write_abort(w);
            return r;
        }
        return ops_->write_commit(w, nullptr);
    }

    // Content, or "ERR<n>" with the negated error.
    std::string Get(const std::string &path)
    {
        ws_vfs_file *f = nullptr;
        ws_stat st;
        int r = ops_->open_read(fs_, path.c_str(), &f, &st);
        if (r < 0)
            return "ERR" + std::to_string(-r);
        std::string out;
        char buf[7]; // small, to exercise offsets
        for (;;) {
            ssize_t n = ops_->pread(f, buf, sizeof(buf), out.size());
            EXPECT_GE(n, 0);
            if (n <= 0)
                break;
            out.append(buf, (size_t)n);
        }
        ops_->close(f);
        return out;
    }

    std::vector<std::string> Names(ws_vfs_dir *d)
    {
        std::vector<std::string> v;
        ws_dirent e;
        while (ops_->readdir(d, &e) > 0)
            v.emplace_back(e.name, e.name_len);
        return v;
    }

    std::vector<std::string> Ls(const std::string &path)
    {
        ws_vfs_dir *d = nullptr;
        EXPECT_EQ(ops_->opendir(fs_, path.c_str(), &d), 0);
        if (!d)
            return {};
        auto v = Names(d);
        ops_->closedir(d);
        return v;
    }

    ws_vfs *fs_ = nullptr;
    const ws_vfs_ops *ops_ = nullptr;
};

TEST_F(MemFs, RootIsAnEmptyDirectory)
{
    ws_stat st;
    ASSERT_EQ(ops_->stat(fs_, ".", &st), 0);
    EXPECT_EQ(st.type, WS_FT_DIRECTORY);
    EXPECT_EQ(st.mode, 0755u);
    EXPECT_TRUE(Ls(".").empty());
    EXPECT_EQ(Get("."), "ERR" + std::to_string(EISDIR));
    ws_write_opts o = {};
    ws_vfs_writer *w = nullptr;
    EXPECT_EQ(ops_->write_begin(fs_, ".", &o, &w), -EISDIR);
    EXPECT_EQ(ops_->remove(fs_, ".", true, nullptr), -EXDEV);
    EXPECT_EQ(ops_->remove(fs_, "a/..", true, nullptr), -EXDEV);
    EXPECT_EQ(ops_->mkdir(fs_, ".", false, 0), -EEXIST);
    EXPECT_EQ(ops_->mkdir(fs_, ".", true, 0), 0);
    ASSERT_EQ(Put("f", "x"), 0);
    EXPECT_EQ(ops_->move(fs_, ".", "g", false), -EXDEV);
    EXPECT_EQ(ops_->move(fs_, "f", ".", true), -EXDEV);
    EXPECT_EQ(ws_memfs_nodes(fs_), 2u);
}

TEST_F(MemFs, WriteThenReadWithModes)
{
    ASSERT_EQ(Put("a.txt", "hello world"), 0);
    EXPECT_EQ(Get("a.txt"), "hello world");
    ws_stat st;
    ASSERT_EQ(ops_->stat(fs_, "a.txt", &st), 0);
    EXPECT_EQ(st.type, WS_FT_REGULAR);
    EXPECT_EQ(st.size, 11u);
    EXPECT_EQ(st.mode, 0644u);
    EXPECT_EQ(st.nlink, 1u);
    EXPECT_GT(st.mtime_ns, 0);

    ws_write_opts o = {};
    o.mode = 0600;
    ASSERT_EQ(Put("a.txt", "v2", o), 0);
    ASSERT_EQ(ops_->stat(fs_, "a.txt", &st), 0);
    EXPECT_EQ(st.mode, 0600u);
    // mode 0 keeps the existing mode.
    ASSERT_EQ(Put("a.txt", "v3"), 0);
    ASSERT_EQ(ops_->stat(fs_, "a.txt", &st), 0);
    EXPECT_EQ(st.mode, 0600u);
    EXPECT_EQ(Get("a.txt"), "v3");
    // An empty file.
    ASSERT_EQ(Put("empty", ""), 0);
    EXPECT_EQ(Get("empty"), "");
    EXPECT_EQ(ws_memfs_bytes(fs_), 2u);
}

TEST_F(MemFs, NothingVisibleBeforeCommitAndAbortKeepsOld)
{
    ASSERT_EQ(Put("f", "old"), 0);
    ws_write_opts o = {};
    ws_vfs_writer *w = nullptr;
    ASSERT_EQ(ops_->write_begin(fs_, "f", &o, &w), 0);
    ASSERT_EQ(ops_->write(w, "new content", 11), 0);
    EXPECT_EQ(Get("f"), "old");
    ops_->write_abort(w);
    EXPECT_EQ(Get("f"), "old");
    EXPECT_EQ(ws_memfs_bytes(fs_), 3u);

    ASSERT_EQ(ops_->write_begin(fs_, "g", &o, &w), 0);
    ASSERT_EQ(ops_->write(w, "x", 1), 0);
    EXPECT_EQ(Get("g"), "ERR" + std::to_string(ENOENT));
    ws_stat st;
    ASSERT_EQ(ops_->write_commit(w, &st), 0);
    EXPECT_EQ(st.size, 1u);
    EXPECT_EQ(Get("g"), "x");
}

TEST_F(MemFs, ParentsAndLeafChecks)
{
    EXPECT_EQ(Put("a/b/c", "x"), -ENOENT);
    ws_write_opts o = {};
    o.create_parents = true;
    ASSERT_EQ(Put("a/b/c", "x", o), 0);
    EXPECT_EQ(Get("a/b/c"), "x");
    ws_stat st;
    ASSERT_EQ(ops_->stat(fs_, "a/b", &st), 0);
    EXPECT_EQ(st.type, WS_FT_DIRECTORY);
    EXPECT_EQ(st.mode, 0755u);
    // A file in the middle of the path.
    EXPECT_EQ(Put("a/b/c/d", "x", o), -ENOTDIR);
    EXPECT_EQ(Get("a/b/c/d"), "ERR" + std::to_string(ENOTDIR));
    // A directory as the leaf.
    EXPECT_EQ(Put("a/b", "x"), -EISDIR);

    ws_write_opts absent = {};
    absent.if_absent = true;
    EXPECT_EQ(Put("a/b/c", "y", absent), -EEXIST);
    // if_absent is checked again at commit.
    ws_vfs_writer *w = nullptr;
    ASSERT_EQ(ops_->write_begin(fs_, "new", &absent, &w), 0);
    ASSERT_EQ(Put("new", "first"), 0);
    ASSERT_EQ(ops_->write(w, "second", 6), 0);
    EXPECT_EQ(ops_->write_commit(w, nullptr), -EEXIST);
    EXPECT_EQ(Get("new"), "first");
}

TEST_F(MemFs, MaxSizeAndQuota)
{
    ws_write_opts o = {};
    o.max_size = 4;
    EXPECT_EQ(Put("f", "12345", o), -EFBIG);
    EXPECT_EQ(Put("f", "1234", o), 0);
    EXPECT_EQ(ws_memfs_bytes(fs_), 4u);

    ws_memfs_set_limits(fs_, 10, 0);
    EXPECT_EQ(Put("g", "1234567"), -WS_EQUOTA);
    EXPECT_EQ(ws_memfs_bytes(fs_), 4u) << "an aborted writer gives its bytes back";
    EXPECT_EQ(Put("g", "123456"), 0);
    EXPECT_EQ(ws_memfs_bytes(fs_), 10u);
    // Until the commit both copies are held, so a full tree refuses even
    // a smaller replacement...
    EXPECT_EQ(Put("g", "1"), -WS_EQUOTA);
    EXPECT_EQ(Get("g"), "123456");
    // ...and a replace frees the old content.
    ws_memfs_set_limits(fs_, 11, 0);
    EXPECT_EQ(Put("g", "1"), 0);
    EXPECT_EQ(ws_memfs_bytes(fs_), 5u);
    ASSERT_EQ(ops_->remove(fs_, "g", false, nullptr), 0);
    EXPECT_EQ(ws_memfs_bytes(fs_), 4u);

    ws_memfs_set_limits(fs_, 0, 4); // root + f + 2 more
    EXPECT_EQ(ops_->mkdir(fs_, "d1", false, 0), 0);
    EXPECT_EQ(Put("d1/x", ""), 0);
    EXPECT_EQ(ops_->mkdir(fs_, "d2", false, 0), -WS_EQUOTA);
    EXPECT_EQ(Put("y", ""), -WS_EQUOTA);
    EXPECT_EQ(ws_memfs_nodes(fs_), 4u);
    uint64_t removed = 0;
    ASSERT_EQ(ops_->remove(fs_, "d1", true, &removed), 0);
    EXPECT_EQ(removed, 2u);
    EXPECT_EQ(ops_->mkdir(fs_, "d2", false, 0), 0);
}

TEST_F(MemFs, LexicalPaths)
{
    ws_write_opts o = {};
    o.create_parents = true;
    ASSERT_EQ(Put("a/b/f", "x", o), 0);
    EXPECT_EQ(Get("a/../a/b/./f"), "x");
    EXPECT_EQ(Get("a//b/f"), "x");
    EXPECT_EQ(Get("./a/b/f"), "x");
    EXPECT_EQ(Get("a/b/f/"), "x");
    EXPECT_EQ(Get("nothere/../a/b/f"), "x") << "resolved lexically";
    EXPECT_EQ(Get(".."), "ERR" + std::to_string(EXDEV));
    EXPECT_EQ(Get("a/../../a/b/f"), "ERR" + std::to_string(EXDEV));
    EXPECT_EQ(Put("../x", "x"), -EXDEV);
    EXPECT_EQ(ops_->mkdir(fs_, "a/../../x", true, 0), -EXDEV);
    EXPECT_EQ(Get(std::string(256, 'n')), "ERR" + std::to_string(ENAMETOOLONG));
    ws_stat st;
    ASSERT_EQ(ops_->stat(fs_, "a/..", &st), 0);
    EXPECT_EQ(st.type, WS_FT_DIRECTORY);
}

TEST_F(MemFs, Mkdir)
{
    EXPECT_EQ(ops_->mkdir(fs_, "d", false, 0700), 0);
    ws_stat st;
    ASSERT_EQ(ops_->stat(fs_, "d", &st), 0);
    EXPECT_EQ(st.mode, 0700u);
    EXPECT_EQ(ops_->mkdir(fs_, "d", false, 0), -EEXIST);
    EXPECT_EQ(ops_->mkdir(fs_, "d", true, 0), 0);
    EXPECT_EQ(ops_->mkdir(fs_, "x/y", false, 0), -ENOENT);
    EXPECT_EQ(ops_->mkdir(fs_, "x/y/z", true, 0), 0);
    ASSERT_EQ(Put("file", "x"), 0);
    EXPECT_EQ(ops_->mkdir(fs_, "file", true, 0), -EEXIST);
    EXPECT_EQ(ops_->mkdir(fs_, "file/sub", true, 0), -ENOTDIR);
    ASSERT_EQ(ops_->stat(fs_, ".", &st), 0);
    EXPECT_EQ(st.nlink, 4u) << "2 + subdirectories d and x";
}

TEST_F(MemFs, Remove)
{
    ws_write_opts o = {};
    o.create_parents = true;
    ASSERT_EQ(Put("d/e/f1", "1", o), 0);
    ASSERT_EQ(Put("d/e/f2", "2", o), 0);
    ASSERT_EQ(Put("d/g", "3", o), 0);
    ASSERT_EQ(ops_->mkdir(fs_, "empty", false, 0), 0);
    uint64_t removed = 0;
    EXPECT_EQ(ops_->remove(fs_, "d", false, &removed), -ENOTEMPTY);
    EXPECT_EQ(Get("d/e/f1"), "1");
    EXPECT_EQ(ops_->remove(fs_, "empty", false, &removed), 0);
    EXPECT_EQ(removed, 1u);
    EXPECT_EQ(ops_->remove(fs_, "d", true, &removed), 0);
    EXPECT_EQ(removed, 5u);
    EXPECT_EQ(ops_->remove(fs_, "d", true, &removed), -ENOENT);
    EXPECT_TRUE(Ls(".").empty());
    EXPECT_EQ(ws_memfs_nodes(fs_), 1u);
    EXPECT_EQ(ws_memfs_bytes(fs_), 0u);
}

TEST_F(MemFs, Move)
{
    ws_write_opts o = {};
    o.create_parents = true;
    ASSERT_EQ(Put("a/f", "f", o), 0);
    ASSERT_EQ(Put("a/sub/g", "g", o), 0);
    ASSERT_EQ(Put("h", "h"), 0);
    ASSERT_EQ(ops_->mkdir(fs_, "emptydir", false, 0), 0);

    EXPECT_EQ(ops_->move(fs_, "a/f", "f2", false), 0);
    EXPECT_EQ(Get("f2"), "f");
    EXPECT_EQ(Get("a/f"), "ERR" + std::to_string(ENOENT));
    EXPECT_EQ(ops_->move(fs_, "f2", "h", false), -EEXIST);
    EXPECT_EQ(ops_->move(fs_, "f2", "h", true), 0);
    EXPECT_EQ(Get("h"), "f");
    EXPECT_EQ(ops_->move(fs_, "h", "h", true), 0);
    EXPECT_EQ(Get("h"), "f");
    EXPECT_EQ(ops_->move(fs_, "nothere", "x", false), -ENOENT);
    EXPECT_EQ(ops_->move(fs_, "h", "nothere/x", false), -ENOENT);
    EXPECT_EQ(ops_->move(fs_, "a", "a/sub/inside", false), -EINVAL);
    EXPECT_EQ(ops_->move(fs_, "h", "emptydir", true), -EISDIR);
    EXPECT_EQ(ops_->move(fs_, "emptydir", "h", true), -ENOTDIR);
    EXPECT_EQ(ops_->move(fs_, "emptydir", "a", true), -ENOTEMPTY);
    EXPECT_EQ(ops_->move(fs_, "a", "emptydir", true), 0);
    EXPECT_EQ(Get("emptydir/sub/g"), "g");
    EXPECT_EQ(Ls("."), (std::vector<std::string>{"emptydir", "h"}));
    EXPECT_EQ(ws_memfs_nodes(fs_), 5u);
}

TEST_F(MemFs, DirHandlesSnapshotNamesAndSurviveRemoval)
{
    ws_write_opts o = {};
    o.create_parents = true;
    ASSERT_EQ(Put("d/b", "b", o), 0);
    ASSERT_EQ(Put("d/a", "a", o), 0);
    ASSERT_EQ(Put("d/sub/x", "x", o), 0);
    ws_vfs_dir *d = nullptr;
    ASSERT_EQ(ops_->opendir(fs_, "d", &d), 0);
    ASSERT_EQ(Put("d/c", "c"), 0);
    EXPECT_EQ(Names(d), (std::vector<std::string>{"a", "b", "sub"}));

    ws_stat st;
    EXPECT_EQ(ops_->stat_at(d, "c", &st), 0) << "lookups see the live directory";
    ws_vfs_dir *sub = nullptr;
    EXPECT_EQ(ops_->opendir_at(d, "a", &sub), -ENOTDIR);
    ASSERT_EQ(ops_->opendir_at(d, "sub", &sub), 0);
    ws_vfs_file *f = nullptr;
    EXPECT_EQ(ops_->open_read_at(d, "sub", &f, &st), -EISDIR);
    ASSERT_EQ(ops_->open_read_at(d, "a", &f, &st), 0);
    EXPECT_EQ(st.size, 1u);
    ops_->close(f);

    ASSERT_EQ(ops_->remove(fs_, "d", true, nullptr), 0);
    EXPECT_EQ(ops_->stat_at(d, "a", &st), -ENOENT);
    EXPECT_EQ(ops_->open_read_at(d, "a", &f, &st), -ENOENT);
    EXPECT_EQ(Names(sub), (std::vector<std::string>{"x"}));
    ops_->closedir(sub);
    ops_->closedir(d);
    EXPECT_EQ(ws_memfs_nodes(fs_), 1u);
}

TEST_F(MemFs, OpenFileKeepsItsContentAcrossReplace)
{
    ASSERT_EQ(Put("f", "old content"), 0);
    ws_vfs_file *f = nullptr;
    ws_stat st;
    ASSERT_EQ(ops_->open_read(fs_, "f", &f, &st), 0);
    ASSERT_EQ(Put("f", "NEW"), 0);
    ASSERT_EQ(ops_->remove(fs_, "f", false, nullptr), 0);
    char buf[64];
    ssize_t n = ops_->pread(f, buf, sizeof(buf), 0);
    ASSERT_EQ(n, 11);
    EXPECT_EQ(std::string(buf, 11), "old content");
    EXPECT_EQ(ops_->pread(f, buf, sizeof(buf), 11), 0);
    EXPECT_EQ(ops_->pread(f, buf, 3, 4), 3);
    EXPECT_EQ(std::string(buf, 3), "con");
    EXPECT_EQ(ws_memfs_bytes(fs_), 11u) << "held by the reader";
    ops_->close(f);
    EXPECT_EQ(ws_memfs_bytes(fs_), 0u);
}

TEST_F(MemFs, PendingWriterFollowsItsDirectory)
{
    ASSERT_EQ(ops_->mkdir(fs_, "d", false, 0), 0);
    ws_write_opts o = {};
    ws_vfs_writer *w = nullptr;
    ASSERT_EQ(ops_->write_begin(fs_, "d/f", &o, &w), 0);
    ASSERT_EQ(ops_->write(w, "x", 1), 0);
    ASSERT_EQ(ops_->remove(fs_, "d", true, nullptr), 0);
    EXPECT_EQ(ops_->write_commit(w, nullptr), -ENOENT);
    EXPECT_EQ(ws_memfs_bytes(fs_), 0u);

    // A moved directory takes a pending write along (as a directory fd
    // would on disk).
    ASSERT_EQ(ops_->mkdir(fs_, "d", false, 0), 0);
    ASSERT_EQ(ops_->write_begin(fs_, "d/f", &o, &w), 0);
    ASSERT_EQ(ops_->move(fs_, "d", "e", false), 0);
    ASSERT_EQ(ops_->write(w, "y", 1), 0);
    ASSERT_EQ(ops_->write_commit(w, nullptr), 0);
    EXPECT_EQ(Get("e/f"), "y");
}

TEST_F(MemFs, ConcurrentReadersNeverSeeTornContent)
{
    const std::string a(100000, 'a'), b(100000, 'b');
    ASSERT_EQ(Put("f", a), 0);
    std::atomic<bool> stop{false};
    std::atomic<int> bad{0}, reads{0};
    std::vector<std::thread> readers;
    for (int t = 0; t < 3; t++) {
        readers.emplace_back([&] {
            while (!stop) {
                std::string s = Get("f");
                if (s != a && s != b)
                    bad++;
                // Listing while the tree changes.
                ws_vfs_dir *d = nullptr;
                if (ops_->opendir(fs_, ".", &d) == 0) {
                    Names(d);
                    ops_->closedir(d);
                }
                reads++;
            }
        });
    }
    for (int i = 0; i < 200; i++) {
        ASSERT_EQ(Put("f", i % 2 ? a : b), 0);
        ASSERT_EQ(Put("tmp" + std::to_string(i % 5), "x"), 0);
        ASSERT_EQ(ops_->remove(fs_, ("tmp" + std::to_string(i % 5)).c_str(), false, nullptr), 0);
    }
    while (reads < 50)
        std::this_thread::yield();
    stop = true;
    for (auto &t : readers)
        t.join();
    EXPECT_EQ(bad, 0);
    EXPECT_EQ(ws_memfs_bytes(fs_), a.size());
}

TEST_F(MemFs, DeepTreeRemovesWithoutRecursion)
{
    std::string path;
    for (int i = 0; i < 1500; i++)
        path += i ? "/d" : "d";
    ASSERT_EQ(ops_->mkdir(fs_, path.c_str(), true, 0), 0);
    EXPECT_EQ(ws_memfs_nodes(fs_), 1501u);
    uint64_t removed = 0;
    ASSERT_EQ(ops_->remove(fs_, "d", true, &removed), 0);
    EXPECT_EQ(removed, 1500u);
}

} // namespace
